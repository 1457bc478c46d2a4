# Sourced by the benchmark scripts: which build they measure.
#
# BENCH_PROFILE picks the Cargo profile: `bench` (the default: release
# without LTO, quick to rebuild while working on speed) or `production`
# (the build to deploy: fat LTO, one codegen unit; see Cargo.toml).
# Sets `bench_profile`, `target` and `bin` (where the binaries land), and
# defines `bench_build PACKAGE...`.
#
# Expects `repo` to be set.

bench_profile=${BENCH_PROFILE:-bench}
target=${CARGO_TARGET_DIR:-$repo/target}
case $bench_profile in
  # Cargo puts the `bench` profile's output in `release` too.
  bench | release) bin=$target/release ;;
  *) bin=$target/$bench_profile ;;
esac

# Builds the given packages with the chosen profile (output on stderr).
bench_build() {
  local args=()
  for package in "$@"; do
    args+=(-p "$package")
  done
  echo "building ${*} with the $bench_profile profile" >&2
  cargo build --profile "$bench_profile" "${args[@]}" >&2
}
