# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes OUT with `const unsigned char NAME[]` (IN's bytes and a final NUL)
# and `const unsigned long NAME_len` (IN's size): a file served from the
# binary, with nothing to find at run time.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n    "
    body "${body}")
file(WRITE "${OUT}.tmp"
    "/* Generated from ${IN} by cmake/embed.cmake: do not edit. */\n"
    "const unsigned char ${NAME}[] = {\n    ${body}0x00\n};\n"
    "const unsigned long ${NAME}_len = ${len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
