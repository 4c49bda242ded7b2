// SPDX-License-Identifier: GPL-2.0
// The reference for the probes' overhead benchmark (bench/probes_bench.cc): a uprobe that does
// nothing. What a call costs with it attached is the price of the trap alone (breakpoint,
// uprobe dispatch, BPF entry, single-step or emulation of the original instruction), the floor
// any uprobe-based probe pays; the benchmark compares cuda_probes' cost with it.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int empty_uprobe(struct pt_regs *ctx) { return 0; }
