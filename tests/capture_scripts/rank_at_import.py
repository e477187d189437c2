"""A utility module that reads the rank from the environment when it is imported."""

import os

RANK_AT_IMPORT = int(os.environ["RANK"])
