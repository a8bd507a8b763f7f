# dimmer-sim age's NAME/request columns (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -P sim_request.cmake
# WLC with every request balanced on its own (wlc/request) beside WLC with its
# connections bound, as the paper's dispatcher binds them: the column must
# really balance per request (a lower mean response time at moderate load, the
# connections of a visit no longer stuck on a slow server), and a policy that
# binds connections itself (age) must be refused with a usage error.
if(NOT SIM)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -P sim_request.cmake")
endif()
execute_process(COMMAND ${SIM} --quick --csv age --loads 0.7 --policies wlc,wlc/request
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dimmer-sim age --policies wlc,wlc/request failed (${rc}):\n${err}")
endif()
# The first table: traffic,load,util %,WLC ms,WLC/req ms,...
if(NOT out MATCHES "traffic,load,util %,WLC ms,WLC/req ms,[^\n]*\n[a-z]+,0\\.7,[0-9.]+,([0-9.]+),([0-9.]+),")
    message(FATAL_ERROR "no WLC and WLC/req columns in:\n${out}")
endif()
set(bound ${CMAKE_MATCH_1})
set(per_request ${CMAKE_MATCH_2})
if(NOT per_request LESS bound)
    message(FATAL_ERROR "WLC/req ${per_request} ms is not below WLC's ${bound} ms:\n${out}")
endif()
execute_process(COMMAND ${SIM} --quick age --policies wlc,age/request
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "age binds its connections")
    message(FATAL_ERROR "age/request: want exit 2 and the reason, got ${rc}:\n${err}")
endif()
message(STATUS "WLC ${bound} ms bound, ${per_request} ms per request; age/request refused")
