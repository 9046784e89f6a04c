#!/usr/bin/env python3
"""split_words.py <string>: the words of <string> as a POSIX shell splits them (quotes,
backslashes and newlines, by Python's shlex; caption_pack splits --decode_args the same way),
each followed by a NUL byte, for bash's `while IFS= read -r -d '' w`. Nothing in the string is
run or expanded ($HOME and * stay as they are). Exit 2 with the problem, e.g.
"No closing quotation", on stderr.

Example:
    utils/split_words.py "--clotho_root '/data/my clotho' --lr=1e-4" | tr '\\0' '\\n'
"""

import shlex
import sys

if len(sys.argv) != 2:
    print("usage: " + __doc__.split("\n\n")[0], file=sys.stderr)
    sys.exit(2)
try:
    words = shlex.split(sys.argv[1])
except ValueError as e:  # an unmatched quote, a backslash at the end
    print(e, file=sys.stderr)
    sys.exit(2)
sys.stdout.write("".join(w + "\0" for w in words))
