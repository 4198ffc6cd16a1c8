# S3 request authentication and parsing (SigV4, aws-chunked, Range, URI helpers, dates): pure code,
# no network, no Beast. Included by src/gateway/CMakeLists.txt.
add_library(granary_s3core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/s3_error.cc
  ${CMAKE_CURRENT_LIST_DIR}/sigv2.cc
  ${CMAKE_CURRENT_LIST_DIR}/sigv4.cc
  ${CMAKE_CURRENT_LIST_DIR}/aws_chunked.cc
  ${CMAKE_CURRENT_LIST_DIR}/http_range.cc
  ${CMAKE_CURRENT_LIST_DIR}/time_format.cc
  ${CMAKE_CURRENT_LIST_DIR}/uri.cc
  ${CMAKE_CURRENT_LIST_DIR}/xml_writer.cc)
target_include_directories(granary_s3core PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(granary_s3core PUBLIC granary_common PRIVATE OpenSSL::Crypto)
