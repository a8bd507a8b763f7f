#!/bin/sh
# The seed power paper's Experiment II, live: dimmer in front of eight
# dimmer-backend nodes (boot delay 7 s, 70 W at full use) and dimmer-load
# playing the exp2 shape compressed 6 times (30 minutes in 5), once per
# policy: always-on, single, dual, multi, flexible, boot-aware, each at a 5 s
# period. Prints the table (as the seed's Table 8) and writes CSV files,
# table.md and power_exp2.png under build/power_exp2 (bench/power_exp2.py
# --help lists the knobs). About 35 minutes. Needs python3 (and gnuplot-nox
# for the plot).
set -eu
cd "$(dirname "$0")/.."
[ -x build/dimmer ] || sh scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
exec python3 bench/power_exp2.py "$@"
