/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* NCCL's communicator hash ("commHash"), computed alike by bpf/cuda_probes.bpf.c (from the
 * ncclUniqueId given to ncclCommInitRank*), by the fake libnccl (sim/fake_nccl: what it tells
 * profiler plugins) and by tests. One definition for all of them; plain C, no includes, so the
 * BPF program (vmlinux.h types) and C++ both use it.
 *
 * WHY this function: NCCL sets comm->commHash = getHash(commId.internal, NCCL_UNIQUE_ID_BYTES)
 * in ncclCommInitRankFunc (src/init.cc) and hands that value to profiler plugins as their
 * communicator id (init's commHash, event descriptors' commHash). Records of the eBPF probes
 * carrying the same value join the profiler plugin's records (nccl_profiler/) and NCCL's own
 * logs without any table.
 *
 * getHash, NVIDIA/nccl src/misc/utils.cc (checked at commit 44a0963, 2020, and init.cc at
 * 48bb7fe): DJB2a over n bytes,
 *     uint64_t result = 5381;
 *     for (int c = 0; c < n; c++) result = ((result << 5) + result) ^ string[c];
 * with `const char* string`: each byte is sign-extended where char is signed (x86-64) and
 * zero-extended where it is unsigned (aarch64, ppc64le). HISTORY: the 2019 tree (commit 01d1836,
 * NCCL 2.4 era) had DJB2 with '+' (getHash over a NUL-terminated string, getnHash seeded 9527
 * over n bytes); values from such old releases do not match this function. Communicators made by
 * ncclCommSplit hash a string NCCL builds itself (parent hash and color), not an argument the
 * probes see: they are not covered.
 *
 * A real commHash of 0 (chance 2^-64) reads as "init not seen" in the probes' records. */
#ifndef ITHBAT_BPF_NCCL_COMM_HASH_H_
#define ITHBAT_BPF_NCCL_COMM_HASH_H_

#define ITHBAT_NCCL_UNIQUE_ID_BYTES 128

/* Signedness of `char` on the platform NCCL was built for (the probed process's, i.e. the
 * target's: for BPF the __TARGET_ARCH_* the program is compiled for). */
#if defined(__TARGET_ARCH_arm64) || defined(__aarch64__) || defined(__TARGET_ARCH_powerpc) || \
    defined(__powerpc64__) || defined(__TARGET_ARCH_s390) || defined(__s390x__)
#define ITHBAT_NCCL_CHAR_IS_SIGNED 0
#else
#define ITHBAT_NCCL_CHAR_IS_SIGNED 1
#endif

/* getHash(id, ITHBAT_NCCL_UNIQUE_ID_BYTES) over the id's bytes. A fixed-count loop: the BPF
 * verifier accepts it (bounded loop, or unrolled by clang). */
static inline unsigned long long ithbat_nccl_comm_hash(const unsigned char *id) {
  unsigned long long h = 5381;
  for (int i = 0; i < ITHBAT_NCCL_UNIQUE_ID_BYTES; i++) {
#if ITHBAT_NCCL_CHAR_IS_SIGNED
    const unsigned long long c = (unsigned long long)(long long)(signed char)id[i];
#else
    const unsigned long long c = (unsigned long long)id[i];
#endif
    h = ((h << 5) + h) ^ c;
  }
  return h;
}

#endif /* ITHBAT_BPF_NCCL_COMM_HASH_H_ */
