"""Byte sizes as `lfs`/`surge setstripe` spell them."""

MIB = 1 << 20


def size_arg(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", MIB), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)
