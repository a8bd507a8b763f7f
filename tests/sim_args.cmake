# dimmer-sim's command line (tests/CMakeLists.txt):
#   cmake -DSIM=dimmer-sim -P sim_args.cmake
# --out that is not a writable folder is refused before any run, and --quick
# shortens only what the command line did not give (--pages, --reps).
if(NOT SIM)
    message(FATAL_ERROR "usage: cmake -DSIM=dimmer-sim -P sim_args.cmake")
endif()
execute_process(COMMAND ${SIM} --out /dev/null --quick hetero
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--out /dev/null: not a folder" OR NOT out STREQUAL "")
    message(FATAL_ERROR "dimmer-sim --out /dev/null: rc ${rc}, stderr:\n${err}\nstdout:\n${out}")
endif()
execute_process(COMMAND ${SIM} --quick --no-plots age --pages 1000 --reps 2 --policies rr
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "site: 1000 pages")
    message(FATAL_ERROR "dimmer-sim --quick age --pages 1000: rc ${rc}:\n${out}\n${err}")
endif()
# A server of no capacity is refused: every demand over it was infinite.
foreach(opt --fmax --fmax-rates)
    execute_process(COMMAND ${SIM} --quick --no-plots alloc ${opt} 0
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 2 OR NOT err MATCHES "${opt}: want a number in \\[1, " OR NOT out STREQUAL "")
        message(FATAL_ERROR "dimmer-sim alloc ${opt} 0: rc ${rc}, stderr:\n${err}\nstdout:\n${out}")
    endif()
endforeach()
# A machine asleep draws no more than idle (it was taken, and sleeping cost power).
execute_process(COMMAND ${SIM} --quick --no-plots power --idle-w 20 --asleep-w 30
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--asleep-w must not exceed --idle-w" OR NOT out STREQUAL "")
    message(FATAL_ERROR "dimmer-sim power --asleep-w 30: rc ${rc}, stderr:\n${err}\nstdout:\n${out}")
endif()
# A mistyped size (a million servers for 115 days of virtual time) ran for
# days: refused before any run, with what to ask for instead.
execute_process(COMMAND ${SIM} --no-plots hetero --servers 1000000 --time 10000000
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "arrivals over its [0-9]+ runs, more than 2e\\+09" OR NOT out STREQUAL "")
    message(FATAL_ERROR "dimmer-sim hetero --servers 1000000: rc ${rc}, stderr:\n${err}\nstdout:\n${out}")
endif()
