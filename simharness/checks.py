def check(layout): return []
