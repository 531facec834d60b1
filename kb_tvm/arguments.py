"""One-line errors for a bad constructor argument, naming the argument, its value and the rule."""


def check_option(name: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r}: {rule}")
