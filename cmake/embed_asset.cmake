# Writes OUTPUT, a C++ source whose function NAMESPACE::FUNCTION() (declared in HEADER) returns the
# bytes of ASSET (NAME in the source tree) as a raw string literal. weft_embed_asset in
# CMakeLists.txt runs it at build time (cmake -P), whenever the asset changes, with nothing but CMake.
foreach(arg ASSET NAME OUTPUT HEADER NAMESPACE FUNCTION)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "embed_asset.cmake: -D${arg}=... is required")
  endif()
endforeach()
set(delimiter "weft_asset")
file(READ "${ASSET}" content)
string(FIND "${content}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${ASSET} holds )${delimiter}\", which would end its raw string literal early")
endif()
file(WRITE "${OUTPUT}"
     "// Generated from ${NAME} by cmake/embed_asset.cmake at build time: edit that file.\n"
     "#include \"${HEADER}\"\n\nnamespace ${NAMESPACE} {\n\nconst char* ${FUNCTION}() {\n"
     "  return R\"${delimiter}(${content})${delimiter}\";\n}\n\n}  // namespace ${NAMESPACE}\n")
