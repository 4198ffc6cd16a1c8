# Unit tests of granary_s3core (src/gateway/auth.cmake). Included by this folder's
# CMakeLists.txt.
add_executable(s3core_test
  ${CMAKE_CURRENT_LIST_DIR}/s3core_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/sigv4_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/aws_chunked_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/xml_writer_test.cc)
# pugixml: the oracle XmlWriter's escaping is checked against.
target_link_libraries(s3core_test PRIVATE granary_s3core granary_catch_main PkgConfig::PUGIXML)
catch_discover_tests(s3core_test EXTRA_ARGS --warn NoTests)
