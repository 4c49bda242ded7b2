/* bpf_check.c - can this kernel run eBPF at all? For scripts/gpu-check, which needs no bpftool.
 * Build: cc -O1 -o bpf_check bpf_check.c
 * Makes the two calls every probe of the agent starts with, on the smallest objects: a
 * one-entry array map and a two-instruction socket filter ("return 0"), then closes both, and
 * says whether the uprobe PMU (what libbpf attaches uprobes through) is registered.
 * Exit: 0 both worked; 3 bpf() is not implemented here (ENOSYS: e.g. gVisor, whose kernel says
 * 4.4.0): no eBPF in this environment; 4 refused (EPERM/EACCES: not root, a seccomp filter,
 * kernel.unprivileged_bpf_disabled, lockdown); 1 another error. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr* attr) { return syscall(__NR_bpf, cmd, attr, sizeof(*attr)); }

static int verdict(const char* what, int err) {
  printf("bpf(%s): %s (errno %d)\n", what, strerror(err), err);
  if (err == ENOSYS) return 3;
  if (err == EPERM || err == EACCES) return 4;
  return 1;
}

int main(void) {
  union bpf_attr a;
  memset(&a, 0, sizeof(a));
  a.map_type = BPF_MAP_TYPE_ARRAY;
  a.key_size = 4;
  a.value_size = 8;
  a.max_entries = 1;
  long map = sys_bpf(BPF_MAP_CREATE, &a);
  if (map < 0) return verdict("BPF_MAP_CREATE", errno);
  close((int)map);

  struct bpf_insn insns[2];
  memset(insns, 0, sizeof(insns));
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K; /* r0 = 0 */
  insns[0].dst_reg = BPF_REG_0;
  insns[1].code = BPF_JMP | BPF_EXIT;
  static char license[] = "GPL";
  memset(&a, 0, sizeof(a));
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insn_cnt = 2;
  a.insns = (uint64_t)(uintptr_t)insns;
  a.license = (uint64_t)(uintptr_t)license;
  long prog = sys_bpf(BPF_PROG_LOAD, &a);
  if (prog < 0) return verdict("BPF_PROG_LOAD", errno);
  close((int)prog);

  FILE* f = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
  int type = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &type) != 1) type = -1;
    fclose(f);
  }
  printf("bpf(): map create and program load work; uprobe PMU: %s\n", type >= 0 ? "registered" : "not found");
  return 0;
}
