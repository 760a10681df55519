#!/usr/bin/env bash
# Submit the paper's scaling studies, one sbatch of slurm/pardnn.sbatch per configuration:
#
#   gpus:  each job of the list on one node with 1, 2, 4, 8 and 16 GPUs, at the list's batch size
#          for that GPU count (--gpus-per-node=K, --devices-per-node K);
#   nodes: each job on 1, 2, 4, ... up to --max-nodes nodes of 16 GPUs, at its 16-GPU batch size
#          (with both studies, the one-node run is the gpus study's 16-GPU run, not submitted twice).
#
# Each configuration is submitted once per entry of --placers: a placer (pardnn-launch --placer P),
# "data" (plain Horovod data parallelism: one task per GPU, --parallelism data, the same global
# batch) or "data+recompute" (the same with gradient checkpointing); with --compare, once, as one
# allocation that trains them all in turn (pardnn-launch --compare, one task per GPU when data is listed).
#
# Usage: slurm/sweep.sh [--jobs FILE] [--study gpus|nodes|both] [--max-nodes N] [--out DIR]
#                       [--placers LIST] [--compare] [--cpus-per-gpu N] [--dry-run] [-- SBATCH_OPTIONS...]
#   --jobs FILE    job list: "JOB B1 B2 B4 B8 B16" lines, "-" for not run (default slurm/paper-jobs.txt)
#   --study        which study to submit (default both)
#   --max-nodes N  largest node count of the nodes study (default 4)
#   --out DIR      pardnn-launch --out of every run; DIR/results.csv collects them (default runs/sweep)
#   --placers LIST comma-separated placers, data, data+recompute (default pardnn)
#   --compare      one allocation per configuration for all of --placers (pardnn-launch --compare)
#   --cpus-per-gpu N  --cpus-per-task of a data-parallel task, one per GPU (default 8)
#   --dry-run      print the sbatch commands instead of running them
#   after --, options passed to every sbatch (e.g. --partition=dgx2 --time=01:00:00)
# Then: pardnn-report DIR
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jobs_file="$here/paper-jobs.txt"
study=both
max_nodes=4
out=runs/sweep
dry_run=0
placers=pardnn
compare=0
cpus_per_gpu=8
sbatch_options=()
gpu_counts=(1 2 4 8 16)

die() {
    echo "sweep.sh: $*" >&2
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --jobs) jobs_file="${2:?--jobs needs a file}"; shift 2 ;;
        --study) study="${2:?--study needs gpus, nodes or both}"; shift 2 ;;
        --max-nodes) max_nodes="${2:?--max-nodes needs a number}"; shift 2 ;;
        --out) out="${2:?--out needs a directory}"; shift 2 ;;
        --placers) placers="${2:?--placers needs a list}"; shift 2 ;;
        --compare) compare=1; shift ;;
        --cpus-per-gpu) cpus_per_gpu="${2:?--cpus-per-gpu needs a number}"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --) shift; sbatch_options=("$@"); break ;;
        -h | --help) sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
case "$study" in gpus | nodes | both) ;; *) die "--study $study: expected gpus, nodes or both" ;; esac
[[ "$max_nodes" =~ ^[1-9][0-9]*$ ]] || die "--max-nodes $max_nodes: expected a whole number >= 1"
[[ -r "$jobs_file" ]] || die "cannot read the job list $jobs_file"
[[ "$cpus_per_gpu" =~ ^[1-9][0-9]*$ ]] || die "--cpus-per-gpu $cpus_per_gpu: expected a whole number >= 1"
IFS=, read -r -a entries <<<"$placers"
[[ ${#entries[@]} -gt 0 ]] || die "--placers: no entry given"
for entry in "${entries[@]}"; do
    [[ "$entry" =~ ^[a-z][a-z0-9_+-]*$ ]] || die "--placers: '$entry' is not a placer, data or data+recompute"
done

run() { # print or run a command
    if [[ $dry_run -eq 1 ]]; then
        printf '%q ' "$@"
        echo
    else
        "$@"
    fi
}

submit_one() { # nodes gpus_per_node job batch entry ("" for --compare)
    local nodes="$1" gpus="$2" job="$3" batch="$4" entry="$5"
    local name tasks=() extra=()
    name="pardnn-$(basename "${job%.toml}")"
    if [[ -z "$entry" ]]; then
        name+="-compare"
        extra=(--compare "$placers")
        [[ ",$placers," == *,data,* || ",$placers," == *,data+recompute,* ]] &&
            tasks=(--ntasks-per-node="$gpus" --cpus-per-task="$cpus_per_gpu")
    elif [[ "$entry" == data || "$entry" == data+recompute ]]; then
        if ((batch % gpus != 0)); then
            echo "sweep.sh: $job at $gpus GPUs: batch $batch does not split over the GPUs; $entry not submitted" >&2
            return
        fi
        name+="-${entry/+/-}"
        tasks=(--ntasks-per-node="$gpus" --cpus-per-task="$cpus_per_gpu")
        extra=(--parallelism data)
        [[ "$entry" == data+recompute ]] && extra+=(--recompute)
        batch=$((batch / gpus)) # pardnn-launch --parallelism data reads --batch-size per GPU
    elif [[ "$entry" != pardnn ]]; then
        name+="-$entry"
        extra=(--placer "$entry")
    fi
    run sbatch --nodes="$nodes" --gpus-per-node="$gpus" ${tasks[@]+"${tasks[@]}"} \
        --job-name="$name-n${nodes}-k${gpus}-b$4" ${sbatch_options[@]+"${sbatch_options[@]}"} \
        "$here/pardnn.sbatch" "$job" --devices-per-node "$gpus" --batch-size "$batch" --out "$out" \
        ${extra[@]+"${extra[@]}"}
}

submit() { # nodes gpus_per_node job batch: every entry of --placers, or one comparison
    if [[ $compare -eq 1 ]]; then
        submit_one "$@" ""
    else
        for entry in "${entries[@]}"; do
            submit_one "$@" "$entry"
        done
    fi
}

line_number=0
while IFS= read -r line || [[ -n "$line" ]]; do
    line_number=$((line_number + 1))
    line="${line%%#*}"
    read -r -a fields <<<"$line"
    [[ ${#fields[@]} -eq 0 ]] && continue
    if [[ ${#fields[@]} -ne $((${#gpu_counts[@]} + 1)) ]]; then
        die "$jobs_file, line $line_number: expected a job and ${#gpu_counts[@]} batch sizes (or -), got: $line"
    fi
    job="${fields[0]}"
    for column in "${!gpu_counts[@]}"; do
        batch="${fields[$((column + 1))]}"
        [[ "$batch" == "-" || "$batch" =~ ^[1-9][0-9]*$ ]] ||
            die "$jobs_file, line $line_number: batch size '$batch' is not a whole number >= 1 or -"
    done
    if [[ "$study" != nodes ]]; then
        for column in "${!gpu_counts[@]}"; do
            batch="${fields[$((column + 1))]}"
            [[ "$batch" == "-" ]] || submit 1 "${gpu_counts[$column]}" "$job" "$batch"
        done
    fi
    if [[ "$study" != gpus ]]; then
        batch="${fields[${#gpu_counts[@]}]}"
        [[ "$batch" == "-" ]] && continue
        nodes=1
        if [[ "$study" == both ]]; then
            nodes=2 # one node of 16 GPUs is the last run of the gpus study
        fi
        while [[ $nodes -lt $max_nodes ]]; do
            submit "$nodes" 16 "$job" "$batch"
            nodes=$((nodes * 2))
        done
        if [[ $max_nodes -gt 1 || "$study" == nodes ]]; then
            submit "$max_nodes" 16 "$job" "$batch"
        fi
    fi
done <"$jobs_file"
