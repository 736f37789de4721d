"""Strings that try to break out of a request line or a reply: quotes of each kind, line breaks,
backslashes, an injection attempt, format fields, non-ASCII, a lone surrogate, NUL and U+2028."""

HOSTILE = [
    "plain",
    "it's",
    'say "hi"',
    "'''",
    '"""',
    "line\nbreak\r\nand\rreturn",
    "back\\slash\\",
    "\\'",
    "x'); import os; os.system('echo pwned'); ('",
    "{session!r} {0} %s",
    "données/ノート 📓.ipynb",
    "lone \udc80 surrogate",
    "nul \x00 and \u2028 separator",
]
