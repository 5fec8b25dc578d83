# params.sh: sourced by the fmnist-train tests; compares the raw float32 parameter dumps of --dump-params.
#
# Two runs that are the same arithmetic up to float32 rounding (1 rank x 2B against 2 ranks x B, another GEMM
# blocking, accumulation) never end bit for bit equal, and how far apart they end depends on which kernels OpenBLAS
# picks on the machine. A tolerance must therefore come from the arithmetic, not from the runs seen on one machine:
#
#   Each step, the two runs compute the same update, each with float32 rounding. A float32 sum of K terms is off by
#   at most about K * u of the sum of their magnitudes (u = 2^-24, the unit roundoff), so a step's update differs
#   between the runs by at most about K * u of its size, K being the longest sum in the step. Over the first steps,
#   while the warmup keeps the lr small enough that a difference in the parameters is not amplified by the steps
#   after it, the runs therefore end at most K * u times the distance the parameters travelled apart.
#
# The reference CNN's longest sum is conv1's weight gradient: batch x 26 x 26 output positions (43,264 terms for a
# global batch of 64), so K * u = 2.6e-3. Measured on Zen 3 (OpenBLAS Haswell kernels), the runs end 5e-7 of the
# distance apart after 10 steps; a 1% error in the update ends 1e-2 apart. After 50 steps the comparison would not
# hold: by then a rounding difference has flipped a max-pool or ReLU decision somewhere and the runs drift apart
# by far more than rounding (4e-6 to 5e-5 of the parameters' norm, depending on the kernels).

# unit_roundoff_times K: prints K * 2^-24.
unit_roundoff_times() { awk -v k="$1" 'BEGIN { printf "%.3g\n", k / 16777216 }'; }

# param_distance A B: the relative L2 distance ||a - b|| / ||a|| of two dumps.
param_distance() {
  paste -d' ' <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
    awk '{ d = $1 - $2; dd += d * d; aa += $1 * $1 } END { printf "%.3g\n", (aa > 0 ? sqrt(dd / aa) : 1) }'
}

# param_distance_travelled A B START: ||a - b|| / ||a - start||, the distance of two runs over the distance that
# run A travelled from START (the initial parameters, dumped by --steps 0).
param_distance_travelled() {
  paste -d' ' <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") <(od -An -v -f -w4 "$3") |
    awk '{ d = $1 - $2; dd += d * d; m = $1 - $3; mm += m * m }
         END { printf "%.3g\n", (mm > 0 ? sqrt(dd / mm) : 1) }'
}

# at_most X LIMIT: true when X <= LIMIT (floats).
at_most() { awk -v x="$1" -v l="$2" 'BEGIN { exit !(x <= l) }'; }
