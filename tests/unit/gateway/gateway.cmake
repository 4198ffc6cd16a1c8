# Unit tests of granary_gateway without sockets: TaskGroup/offload, the data path and the
# reclaimer over real chunk stores and index in temp dirs, and handleRequest() driven with
# in-memory bodies. Included by this folder's CMakeLists.txt.
add_executable(gateway_test
  ${CMAKE_CURRENT_LIST_DIR}/task_group_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/buffer_budget_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/connection_slots_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/data_path_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/reclaimer_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/background_leader_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/repairer_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/index_recovery_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/handler_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/cors_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/post_form_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/bucket_policy_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/lifecycle_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/md5_lanes_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc)
target_link_libraries(gateway_test PRIVATE granary_gateway granary_catch_main)
# A warc.gz member of 32 KiB that inflates to 32 MiB (the index_kv tests' fixture).
target_compile_definitions(gateway_test PRIVATE
  GRANARY_BOMB_WARC_GZ="${PROJECT_SOURCE_DIR}/tests/unit/index_kv/testdata/bomb.warc.gz")
catch_discover_tests(gateway_test TEST_PREFIX "gateway." EXTRA_ARGS --warn NoTests)
