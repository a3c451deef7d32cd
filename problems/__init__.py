"""Registered problems: each module registers its problems on import."""

from t2tlite.problems import algorithmic  # noqa: F401
from t2tlite.problems import multi30k  # noqa: F401
from t2tlite.problems import parsing  # noqa: F401
from t2tlite.problems import translate_files  # noqa: F401
from t2tlite.problems import wmt  # noqa: F401
from t2tlite.problems.problem import Problem, ProblemError

__all__ = ["Problem", "ProblemError"]
