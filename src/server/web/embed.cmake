# Writes a C++ source defining sluice::server::web_page() from the page file:
#   cmake -DIN=index.html -DOUT=web_page.cpp -P embed.cmake
# The bytes go in as a hex array, so nothing in the page needs escaping.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "// Generated from ${IN} by src/server/web/embed.cmake; do not edit.\n"
  "#include \"server/web_page.h\"\n\nnamespace sluice::server {\nnamespace {\n"
  "const unsigned char kPage[${n} + 1] = {\n${bytes}0x00};\n}  // namespace\n\n"
  "std::string_view web_page() { return {reinterpret_cast<const char*>(kPage), ${n}}; }\n\n"
  "}  // namespace sluice::server\n")
