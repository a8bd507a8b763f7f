# dimmer-sim power --ramp (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -P sim_ramp.cmake
# Experiment II with its rises and falls widened: always-on, whose servers are
# all awake, only feels the load's bursts, so slower rises must give it a
# larger share of good pages than exp2's 5 s ones; a ramp longer than the
# levels leave room for is said on stderr and in the table's title.
if(NOT SIM)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -P sim_ramp.cmake")
endif()
set(good "")
foreach(ramp 0 30)
    execute_process(COMMAND ${SIM} --quick --csv power --exp 2 --periods 5 --no-ablation
                            --policies always-on --ramp ${ramp}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "dimmer-sim power --ramp ${ramp} failed (${rc}):\n${err}")
    endif()
    # policy,power W,power %,valid,good %,...
    if(NOT out MATCHES "\nalways-on,[0-9.]+,[0-9.]+,[0-9]+,([0-9.]+),")
        message(FATAL_ERROR "no always-on row in:\n${out}")
    endif()
    list(APPEND good ${CMAKE_MATCH_1})
endforeach()
list(GET good 0 fast)
list(GET good 1 slow)
if(NOT slow GREATER fast)
    message(FATAL_ERROR "good pages with 30 s ramps (${slow} %) not above 5 s ramps' (${fast} %)")
endif()
execute_process(COMMAND ${SIM} --quick --csv power --exp 2 --periods 5 --no-ablation
                        --policies always-on --ramp 60
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT err MATCHES "leave room for 47.5 s ramps at the shortest"
   OR NOT out MATCHES "ramps 47.5 s")
    message(FATAL_ERROR "--ramp 60: want the 47.5 s the levels leave, got ${rc}:\n${err}\n${out}")
endif()
message(STATUS "always-on good pages: ${fast} % with 5 s ramps, ${slow} % with 30 s")
