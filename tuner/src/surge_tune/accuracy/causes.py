"""The causes the accuracy benchmark scores, and how each tool's answers map onto them.

A cause is what a label names: the injected pathology, or "none" for a clean control. Both tools speak
their own vocabulary (the tuner's rule codes, Drishti's insight codes), so each answer is mapped to a cause
here, once, for both tools. An answer that names no cause (Drishti's "write intensive" or "could use
non-blocking I/O") maps to None and is skipped when picking a tool's top answer.
"""

from __future__ import annotations

NONE = "none"

# cause id -> what the injected pathology is
CAUSES = {
    "small-transfers": "tiny transfers",
    "fsync-per-write": "fsync after every write",
    "narrow-shared-stripe": "a shared file on too few stripes for its writers (or aggregators)",
    "rank-imbalance": "one rank doing all (or most) of the I/O",
    "straggler": "ranks moving equal bytes, some held up by a slow storage target, server or node",
    "random-access": "random offsets",
    "metadata-storm": "many small files",
    "independent-io": "independent I/O where collective would win",
    "unaligned-access": "accesses not aligned to the file system block or stripe",
    "stdio-bulk": "bulk data through STDIO",
}

# tuner rule code -> cause (small-transfers is split by the pattern its evidence names)
TUNER = {
    "small-transfers": "small-transfers",
    "fsync-per-write": "fsync-per-write",
    "shared-file-layout": "narrow-shared-stripe",
    "few-aggregators": "narrow-shared-stripe",
    "load-imbalance": "rank-imbalance",
    "straggler": "straggler",
    "random-access": "random-access",
    "fpp-metadata-storm": "metadata-storm",
    "metadata-bound": "metadata-storm",
    "independent-io": "independent-io",
    "stdio-bulk": "stdio-bulk",
}

# Drishti insight code -> cause (drishti/includes/config.py names the codes)
DRISHTI = {
    "S01": "stdio-bulk",
    "P05": "small-transfers",
    "P06": "small-transfers",
    "P08": "unaligned-access",
    "P11": "random-access",
    "P13": "random-access",
    "P15": "independent-io",
    "P16": "independent-io",
    "M02": "independent-io",
    "M03": "independent-io",
    "P17": "metadata-storm",
    "P18": "rank-imbalance",
    "P19": "straggler",  # time imbalance "caused by stragglers": the bytes may be equal
    "P21": "rank-imbalance",
    "P22": "rank-imbalance",
}


def known(cause: str) -> bool:
    return cause == NONE or cause in CAUSES


def tuner_cause(finding) -> str | None:
    """The cause a tuner finding names; a small-transfers finding about alignment names unaligned-access."""
    if finding.code == "small-transfers" and finding.evidence.get("pattern") == "unaligned":
        return "unaligned-access"
    return TUNER.get(finding.code)


def drishti_cause(code: str) -> str | None:
    return DRISHTI.get(code)
