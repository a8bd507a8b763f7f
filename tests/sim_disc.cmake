# dimmer-sim's server discipline (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -P sim_disc.cmake
# --discipline fifo reaches the power and hetero experiments' servers: the
# tables say so, and the figures differ from processor sharing's (seeded
# runs: the same every time); a bad value is refused. --queue-order page
# reaches the power experiment's FIFO servers.
if(NOT SIM)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -P sim_disc.cmake")
endif()
foreach(exp power hetero)
    if(exp STREQUAL "power")
        set(args power --exp 2 --periods 5 --policies always-on,multi --no-ablation)
    else()
        set(args hetero --sizes exp --loads 0.5 --policies random,jsq)
    endif()
    foreach(disc ps fifo)
        execute_process(COMMAND ${SIM} --quick --no-plots ${args} --discipline ${disc}
                        RESULT_VARIABLE rc OUTPUT_VARIABLE out_${disc} ERROR_VARIABLE err)
        if(NOT rc EQUAL 0)
            message(FATAL_ERROR "dimmer-sim ${exp} --discipline ${disc} failed (${rc}):\n${err}")
        endif()
    endforeach()
    string(FIND "${out_fifo}" "FIFO" at)
    if(at LESS 0)
        message(FATAL_ERROR "dimmer-sim ${exp} --discipline fifo does not say FIFO:\n${out_fifo}")
    endif()
    string(FIND "${out_ps}" "FIFO" at)
    if(NOT at LESS 0)
        message(FATAL_ERROR "dimmer-sim ${exp} --discipline ps says FIFO:\n${out_ps}")
    endif()
    # The tables' figures (the lines with digits, the notes aside) must move.
    string(REGEX MATCHALL "\n(multi|0.5)[^\n]*" rows_ps "${out_ps}")
    string(REGEX MATCHALL "\n(multi|0.5)[^\n]*" rows_fifo "${out_fifo}")
    if(NOT rows_ps OR "${rows_ps}" STREQUAL "${rows_fifo}")
        message(FATAL_ERROR "dimmer-sim ${exp}: the same figures under ps and fifo:\n${rows_ps}")
    endif()
endforeach()
execute_process(COMMAND ${SIM} --quick power --discipline lifo
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--discipline: ps or fifo, not 'lifo'")
    message(FATAL_ERROR "--discipline lifo was not refused (${rc}): ${err}")
endif()
# --queue-order page reaches the power experiment's FIFO servers: the table
# says so and the figures move; without fifo it is refused.
set(args power --exp 2 --periods 5 --policies always-on,multi --no-ablation --discipline fifo)
execute_process(COMMAND ${SIM} --quick --no-plots ${args} --queue-order page
                RESULT_VARIABLE rc OUTPUT_VARIABLE out_page ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out_page MATCHES "oldest page first, pages past 2 s")
    message(FATAL_ERROR "dimmer-sim power --queue-order page (${rc}):\n${out_page}${err}")
endif()
execute_process(COMMAND ${SIM} --quick --no-plots ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out_fifo ERROR_VARIABLE err)
string(REGEX MATCHALL "\nmulti[^\n]*" rows_fifo "${out_fifo}")
string(REGEX MATCHALL "\nmulti[^\n]*" rows_page "${out_page}")
if(NOT rows_fifo OR "${rows_fifo}" STREQUAL "${rows_page}")
    message(FATAL_ERROR "dimmer-sim power: the same figures in arrival and page order:\n${rows_page}")
endif()
execute_process(COMMAND ${SIM} --quick power --queue-order page
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--queue-order page needs --discipline fifo")
    message(FATAL_ERROR "--queue-order page without fifo was not refused (${rc}): ${err}")
endif()
# --warm scores the second of two plays of the pattern: the title says so
# and the figures move (the policies meet it with a memory).
execute_process(COMMAND ${SIM} --quick --no-plots ${args} --warm
                RESULT_VARIABLE rc OUTPUT_VARIABLE out_warm ERROR_VARIABLE err)
string(REGEX MATCHALL "\nmulti[^\n]*" rows_warm "${out_warm}")
if(NOT rc EQUAL 0 OR NOT out_warm MATCHES "the second of two plays"
   OR "${rows_warm}" STREQUAL "${rows_fifo}")
    message(FATAL_ERROR "dimmer-sim power --warm (${rc}):\n${out_warm}${err}")
endif()
message(STATUS "--discipline fifo reaches power and hetero, --queue-order page and --warm power")
