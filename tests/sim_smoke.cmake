# The smoke run of dimmer-sim (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -DOUT=folder -P sim_smoke.cmake
# Runs `dimmer-sim --quick all` with two threads into OUT/a and with one into
# OUT/b (no plots), checks that each experiment wrote its tables, and that
# every CSV of the two runs is byte for byte the same.
if(NOT SIM OR NOT OUT)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -DOUT=folder -P sim_smoke.cmake")
endif()
file(REMOVE_RECURSE ${OUT})
foreach(run a b)
    if(run STREQUAL "a")
        set(jobs 2)
    else()
        set(jobs 1)
    endif()
    execute_process(COMMAND ${SIM} --quick --no-plots --jobs ${jobs} --out ${OUT}/${run} all
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "dimmer-sim --quick all (jobs ${jobs}) failed (${rc}):\n${err}")
    endif()
endforeach()
# Every experiment's tables are there (one file per table at least).
foreach(stem power_exp1_5s power_exp2_5s power_exp2_1s power_mechanisms age hetero alloc_fig6 alloc_fig11)
    if(NOT EXISTS ${OUT}/a/${stem}.csv)
        message(FATAL_ERROR "no ${stem}.csv from dimmer-sim --quick all")
    endif()
endforeach()
file(GLOB csvs RELATIVE ${OUT}/a ${OUT}/a/*.csv)
list(LENGTH csvs n)
foreach(f ${csvs})
    file(READ ${OUT}/a/${f} x)
    file(READ ${OUT}/b/${f} y)
    if(NOT x STREQUAL y)
        message(FATAL_ERROR "${f} differs between --jobs 2 and --jobs 1: not deterministic")
    endif()
endforeach()
message(STATUS "dimmer-sim --quick all: ${n} CSV files, identical with 2 threads and 1")
