"""sless bytecode compiler: compiles the Python sources of a build, so that no cold start
compiles them (instances run their code from a read-only directory, where the import system
cannot leave the .pyc files it makes).

The platform starts it as `python -I -S -c <this file>` and keeps it for many builds. It writes
the interpreter's cache tag (such as cpython-311) and a newline first, then answers requests in
order. A request on stdin is a source file's contents, after their length as 4 bytes big-endian;
the answer on stdout is the contents of an unchecked hash-based .pyc of that source (PEP 552),
after their length as 4 bytes big-endian, or the length 0 alone when the source does not compile
(importing it reports why). It compiles what it is given and never runs it.
"""

import importlib.util
import marshal
import sys

_UNCHECKED_HASH = (1).to_bytes(4, "little")  # hash-based, source not checked at import


def _pyc(source):
    try:
        code = compile(source, "<source>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        return b""
    # The import system sets the code's file name to the source's path when it loads it.
    return (importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(source)
            + marshal.dumps(code))


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(sys.implementation.cache_tag.encode() + b"\n")
    stdout.flush()
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            return
        source = stdin.read(int.from_bytes(head, "big"))
        out = _pyc(source)
        stdout.write(len(out).to_bytes(4, "big") + out)
        stdout.flush()


main()
