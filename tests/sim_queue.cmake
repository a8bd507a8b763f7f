# dimmer-sim age with the pool's queue (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -P sim_queue.cmake
# At heavy load, with max_conns 1 on every server (--queue 0.25), the column
# balanced per request must have a lower mean response time with the queue
# in size order than in arrival order, and the paper's WLC (connections
# bound, never queued) must be the same in both runs. The run is seeded:
# the same result every time.
if(NOT SIM)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -P sim_queue.cmake")
endif()
foreach(order arrival size)
    execute_process(COMMAND ${SIM} --quick --csv age --policies wlc,wlc/request --loads 0.9
                            --queue 0.25 --queue-order ${order}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "dimmer-sim age --queue-order ${order} failed (${rc}):\n${err}")
    endif()
    string(REGEX MATCH "\nheavy,0.9,[^,]*,([0-9.]+),([0-9.]+)," row "${out}")
    if(NOT row)
        message(FATAL_ERROR "no heavy row in:\n${out}")
    endif()
    set(wlc_${order} ${CMAKE_MATCH_1})
    set(req_${order} ${CMAKE_MATCH_2})
endforeach()
if(NOT wlc_arrival STREQUAL wlc_size)
    message(FATAL_ERROR "the bound WLC column moved with --queue-order: ${wlc_arrival} / ${wlc_size}")
endif()
# Hundredths of a ms, compared as integers.
string(REPLACE "." "" a ${req_arrival})
string(REPLACE "." "" s ${req_size})
if(NOT s LESS a)
    message(FATAL_ERROR "WLC/req: size order ${req_size} ms, not below arrival order ${req_arrival} ms")
endif()
message(STATUS "WLC/req at heavy load: arrival ${req_arrival} ms, size ${req_size} ms; WLC ${wlc_size} ms")
