"""How the recipes are proven.

- `setup.sh`, `test.sh`, `docker-engine.sh`, `slurm-cluster.sh`, `measure-image.sh`: set up a machine
  and run the test suite on two pytest workers (`bash ci/test.sh --fast` for the unit tests, `bash
  ci/test.sh` for the per-push tier, `bash ci/test.sh --full` for every test); `prepare-images.sh`: the
  images the container tests use, built in the background while the first tests run; `reaper.py`: what
  `test.sh` runs under, so that the daemons a run starts stop when it ends and their CPU time is counted;
  `durations.py`: each test module's time, which `test.sh` prints at its end; `suite_report.py`: a tier's
  tally against what it collected (green on less is red), and the full tier's report; `reference_loop.py`:
  the machine's speed, which `test.sh` prints and the benchmarks keep beside their times.
- `debian-rootfs.sh`: a fresh Debian root file system (bookworm or trixie) in which the README's quick
  start is run as a newcomer runs it (tests/integration/test_quickstart_debian.py); sid for `apptainer.sh`.
- `apptainer.sh`: an `apptainer` command on machines without one (on Debian 12: Debian unstable's, in a
  root file system of its own), for `--runtime apptainer` and tests/integration/test_apptainer.py.
- `runner-preflight.sh`: what a self-hosted GPU runner needs, checked first by the nightly gpu job.
- `ci.nightly`: the nightly container CI (`invoke nightly`): the matrix, its planning, the runner, the
  report and the issue filer.
- `ci.bench`: the benchmarks (`invoke bench`, the host-overhead benchmark, the time to accuracy); their
  kept reports are in docs/bench/.
- `imports.py`: the library modules each recipe's train.py pulls in, with their lines (`python -m
  ci.imports`).
- `results.py`: the recipes' README Results sections (`invoke results`), from the kept runs in
  docs/results/.

Unlike commands/, these run processes and write files; the pure parts are named (`matrix`, `plan`,
`report`'s renderers) and unit-tested on their own.
"""
