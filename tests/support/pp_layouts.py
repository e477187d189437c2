"""pipeline_model_parallel_layout strings Megatron's parser accepts (with their pp) and
refuses, shared by the pure tests and the parity with megatron-core's parser."""

GOOD = [  # (layout, pp)
    ("Et*3|(tt|)*29,m|L", 16),
    ("Et*3|(tt|)*29,m|L", 8),
    ("Ett|tt|tt|ttL", 2),
    ("E|t*4|t*4|L", 4),
    ("Et|(t|)*2,tL", 4),
    ("E(t|)*3,t|*2L", 3),   # 'x*n' on '|': empty stages
    ("Ettt|tttL", 1),
    ("E,t*2|t,t|(tt|)*3,mL", 2),
]
BAD = ["Et*3|(tt|*29,m|L", "Ex|L", "tE|L", "Et|Lt", "EEt|L", "Et|t", "(Et)|L", "Et**2|L",
       "Et|(t(t|)*2)*2|L", "Et|tm|tL", "Et |L"]
