#!/bin/sh
# embed.sh SYMBOL FILE: print a C file defining SYMBOL[] (NUL-terminated) and
# SYMBOL_len with FILE's bytes, so the binary carries its Lua script.
set -eu
sym=$1
file=$2
echo "/* generated from $file by tools/embed.sh: do not edit */"
echo "#include <stddef.h>"
echo "const char ${sym}[] = {"
od -An -v -tx1 "$file" | sed -e 's/  */ /g' -e 's/^ //' -e '/^$/d' -e 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo "0x00 };"
echo "const size_t ${sym}_len = sizeof(${sym}) - 1;"
