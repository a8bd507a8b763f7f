# The purity check of a policy library (DESIGN.md, "Policies are pure"):
#   cmake -DNM=nm -DLIB=libdm_balancers.a -P purity.cmake
# Every symbol the library's objects use must be defined inside the library or
# be one of the plain libc/libm functions below: memory, strings, sorting and
# arithmetic. libuv, a clock, rand(), threads, locks, sleeping, I/O and
# logging are not among them, so a policy that reaches for one fails the
# suite, whichever object it is in, and says which symbol and where.
if(NOT LIB OR NOT NM)
    message(FATAL_ERROR "usage: cmake -DNM=nm -DLIB=archive.a [-DWITH=pure.a...] -P purity.cmake")
endif()
set(allowed
    # memory
    malloc calloc realloc free aligned_alloc
    # strings and bytes
    memcpy memmove memset memcmp memchr strlen strcmp strncmp strchr strrchr
    # sorting and searching
    qsort bsearch
    # numbers to and from text in memory (no I/O; the C locale, never set by dimmer)
    strtod snprintf vsnprintf
    # arithmetic (libm)
    exp exp2 log log1p log2 pow cos sin sqrt floor ceil round lround llround fabs fmin fmax ldexp frexp
    # what the compiler itself calls
    __stack_chk_fail __assert_fail abort
    # clang turns memcmp() == 0 into bcmp()
    bcmp)
# Sanitizer and compiler runtime hooks are not calls a policy makes.
set(allowed_prefixes __asan_ __ubsan_ __sanitizer_ __tsan_ __msan_ __atomic_ __sync_)

execute_process(COMMAND ${NM} -u ${LIB} OUTPUT_VARIABLE undefined_out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} -u ${LIB} failed")
endif()

# What the library defines, and what WITH defines: other pure libraries
# (checked by their own test) that the library may call.
set(defined "")
foreach(archive ${LIB} ${WITH})
    execute_process(COMMAND ${NM} --defined-only ${archive} OUTPUT_VARIABLE defined_out
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${NM} --defined-only ${archive} failed")
    endif()
    string(REPLACE "\n" ";" lines "${defined_out}")
    foreach(line ${lines})
        if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ ]+)$")
            list(APPEND defined ${CMAKE_MATCH_1})
        endif()
    endforeach()
endforeach()

set(bad "")
set(object "?")
string(REPLACE "\n" ";" lines "${undefined_out}")
foreach(line ${lines})
    if(line MATCHES "^(.+\\.o):$")
        set(object ${CMAKE_MATCH_1})
        continue()
    endif()
    if(NOT line MATCHES "^ *U ([^ @]+)")
        continue()
    endif()
    set(sym ${CMAKE_MATCH_1})
    list(FIND defined ${sym} in_lib)
    # _FORTIFY_SOURCE (Debian's hardening flags) calls __memcpy_chk for
    # memcpy and so on: the same function with a bounds check.
    set(plain ${sym})
    if(sym MATCHES "^__(.+)_chk$")
        set(plain ${CMAKE_MATCH_1})
    endif()
    list(FIND allowed ${plain} ok)
    if(NOT in_lib EQUAL -1 OR NOT ok EQUAL -1)
        continue()
    endif()
    set(prefixed FALSE)
    foreach(p ${allowed_prefixes})
        string(FIND "${sym}" "${p}" at)
        if(at EQUAL 0)
            set(prefixed TRUE)
        endif()
    endforeach()
    if(NOT prefixed)
        list(APPEND bad "${sym} (${object})")
    endif()
endforeach()

if(bad)
    string(REPLACE ";" "\n  " shown "${bad}")
    message(FATAL_ERROR "${LIB} is not pure: it uses\n  ${shown}\n"
            "Policies get time as now_us and randomness as a struct dm_rng (DESIGN.md); "
            "a plain libc function that is truly needed goes into tests/purity.cmake.")
endif()
message(STATUS "${LIB}: pure (every symbol it uses is its own or plain libc/libm)")
