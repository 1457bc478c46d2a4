# Sourced by the benchmark scripts: which build they measure.
#
# BENCH_PROFILE picks the build: `bench` (the default: the Cargo profile
# of that name, release without LTO, quick to rebuild while working on
# speed), `production` (the Cargo profile to deploy: fat LTO, one codegen
# unit; see Cargo.toml) or `pgo` (the production build, but the processor
# optimised from a training profile by deploy/build-pgo.sh: about 15
# minutes when the sources changed, and the training needs the local
# broker).
# Sets `bench_profile`, `target` and `bin` (where the binaries land), and
# defines `bench_build PACKAGE...`.
#
# Expects `repo` to be set.

bench_profile=${BENCH_PROFILE:-bench}
target=${CARGO_TARGET_DIR:-$repo/target}
case $bench_profile in
  # Cargo puts the `bench` profile's output in `release` too.
  bench | release) bin=$target/release ;;
  pgo) bin=$target/pgo-bin ;;
  *) bin=$target/$bench_profile ;;
esac

# Builds the given packages with the chosen profile (output on stderr).
# For `pgo`, the processor comes from deploy/build-pgo.sh and the others
# from the production profile, copied beside it.
bench_build() {
  local args=() package
  for package in "$@"; do
    args+=(-p "$package")
  done
  if [ "$bench_profile" = pgo ]; then
    echo "building ${*}: the processor from a profile, the others with the production profile" >&2
    "$repo/deploy/build-pgo.sh"
    local others=()
    for package in "$@"; do
      [ "$package" = gpuledger-processor ] || others+=("$package")
    done
    if [ "${#others[@]}" -gt 0 ]; then
      cargo build --profile production "${args[@]}" >&2
      for package in "${others[@]}"; do
        cp "$target/production/$package" "$bin/"
      done
    fi
    return
  fi
  echo "building ${*} with the $bench_profile profile" >&2
  cargo build --profile "$bench_profile" "${args[@]}" >&2
}
