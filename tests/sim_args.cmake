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
# So for age, alloc and power: the work of every run (requests; alloc's
# delays looked at and annealing iterations) and the memory of one (age's
# sites, alloc's client-server delays), counted before any run.
foreach(case
        "age;--time;1000000;--reps;1000|requests over its [0-9]+ runs, more than 1e\\+10"
        "age;--pages;10000000;--reps;100|sites of 10000000 pages and their objects"
        "alloc;--iterations;1e9;--seeds;1000|CPU-seconds of work over its [0-9]+ instances"
        "alloc;--clients;1000000;--servers;10000|client-server delays in one instance"
        "alloc;--frame-load;0,0|--frame-load: want whole numbers from 1"
        "power;--sessions;100000;--objects;1000;--think;0.01|requests over its runs, more than 1e\\+10")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts -1 want)
    list(REMOVE_AT parts -1)
    execute_process(COMMAND ${SIM} --no-plots ${parts}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 2 OR NOT err MATCHES "${want}" OR NOT out STREQUAL "")
        message(FATAL_ERROR "dimmer-sim ${parts}: rc ${rc}, stderr:\n${err}\nstdout:\n${out}")
    endif()
endforeach()
