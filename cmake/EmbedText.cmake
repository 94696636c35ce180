# cmake -DINPUT=<file> -DOUTPUT=<file.cpp> -DSYMBOL=<name> -P EmbedText.cmake: writes a C++ file
# that defines `extern const char memwire::detail::<name>[]` holding the input's text (PTX).
file(READ ${INPUT} text)
set(delimiter "memwire_text")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} holds the raw string's delimiter")
endif()
file(WRITE ${OUTPUT}.new
  "// Generated from ${INPUT} by cmake/EmbedText.cmake; do not edit.\n"
  "namespace memwire::detail {\n"
  "extern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"${delimiter}(${text})${delimiter}\";\n"
  "}  // namespace memwire::detail\n")
file(COPY_FILE ${OUTPUT}.new ${OUTPUT} ONLY_IF_DIFFERENT)
