"""Small integer helpers shared across kvcore (mirror ``vllm.utils.math_utils``)."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(a // -b)
