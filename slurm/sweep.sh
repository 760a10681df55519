#!/usr/bin/env bash
# Submit the paper's scaling studies, one sbatch of slurm/pardnn.sbatch per configuration:
#
#   gpus:  each job of the list on one node with 1, 2, 4, 8 and 16 GPUs, at the list's batch size
#          for that GPU count (--gpus-per-node=K, --devices-per-node K);
#   nodes: each job on 1, 2, 4, ... up to --max-nodes nodes of 16 GPUs, at its 16-GPU batch size
#          (with both studies, the one-node run is the gpus study's 16-GPU run, not submitted twice).
#
# Usage: slurm/sweep.sh [--jobs FILE] [--study gpus|nodes|both] [--max-nodes N] [--out DIR]
#                       [--dry-run] [-- SBATCH_OPTIONS...]
#   --jobs FILE    job list: "JOB B1 B2 B4 B8 B16" lines, "-" for not run (default slurm/paper-jobs.txt)
#   --study        which study to submit (default both)
#   --max-nodes N  largest node count of the nodes study (default 4)
#   --out DIR      pardnn-launch --out of every run; DIR/results.csv collects them (default runs/sweep)
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
        --dry-run) dry_run=1; shift ;;
        --) shift; sbatch_options=("$@"); break ;;
        -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
case "$study" in gpus | nodes | both) ;; *) die "--study $study: expected gpus, nodes or both" ;; esac
[[ "$max_nodes" =~ ^[1-9][0-9]*$ ]] || die "--max-nodes $max_nodes: expected a whole number >= 1"
[[ -r "$jobs_file" ]] || die "cannot read the job list $jobs_file"

submit() { # nodes gpus_per_node job batch
    local nodes="$1" gpus="$2" job="$3" batch="$4"
    local name
    name="pardnn-$(basename "${job%.toml}")-n${nodes}-k${gpus}-b${batch}"
    local command=(sbatch --nodes="$nodes" --gpus-per-node="$gpus" --job-name="$name"
        ${sbatch_options[@]+"${sbatch_options[@]}"}
        "$here/pardnn.sbatch" "$job" --devices-per-node "$gpus" --batch-size "$batch" --out "$out")
    if [[ $dry_run -eq 1 ]]; then
        printf '%q ' "${command[@]}"
        echo
    else
        "${command[@]}"
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
