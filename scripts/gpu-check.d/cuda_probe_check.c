/* cuda_probe_check.c - a tiny CUDA program with known call counts for scripts/gpu-check.
 * Needs no CUDA toolkit: the driver is dlopened and its functions are reached the three ways a
 * program reaches them (dlsym of the exported name, cuGetProcAddress_v2 with the legacy-stream
 * flags, cuGetProcAddress_v2 with the per-thread flags as libcudart does under
 * --default-stream per-thread), so the agent's probes are checked on every path, the
 * cuGetProcAddress entry points included.
 * Build: cc -O1 -o cuda_probe_check cuda_probe_check.c -ldl
 * Usage: cuda_probe_check LIBCUDA N READY GO DONE EXIT
 *   sets up a context (the process is then a GPU process NVML lists), creates READY holding its
 *   pid, waits for GO (at most 120 s), makes N launches per path and the syncs below, writes its
 *   own counts as one JSON object to DONE, waits for EXIT (at most 120 s). Exit 0 done, 1 a CUDA
 *   call failed, 2 usage or a timeout. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef CUresult (*init_t)(unsigned);
typedef CUresult (*devget_t)(CUdevice*, int);
typedef CUresult (*retain_t)(CUcontext*, CUdevice);
typedef CUresult (*setcur_t)(CUcontext);
typedef CUresult (*modload_t)(CUmodule*, const void*);
typedef CUresult (*getfn_t)(CUfunction*, CUmodule, const char*);
typedef CUresult (*screate_t)(CUstream*, unsigned);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
typedef CUresult (*ssync_t)(CUstream);
typedef CUresult (*csync_t)(void);
typedef CUresult (*gpa_t)(const char*, void**, int, uint64_t, int*);

static const char kPtx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry ithbat_empty()\n{\n\tret;\n}\n";

static int wait_for(const char* path) {
  for (int i = 0; i < 120000; ++i) {
    if (access(path, F_OK) == 0) return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

#define SYM(type, name)                                                   \
  type name = (type)dlsym(h, #name);                                      \
  if (!name) {                                                            \
    fprintf(stderr, "cuda_probe_check: %s not exported\n", #name);        \
    return 1;                                                             \
  }
#define CK(call)                                                          \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    if (r_ != 0) {                                                        \
      fprintf(stderr, "cuda_probe_check: %s = %d\n", #call, r_);          \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s LIBCUDA N READY GO DONE EXIT\n", argv[0]);
    return 2;
  }
  const long n = atol(argv[2]);
  if (n <= 0 || n > 10000000) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cuda_probe_check: dlopen: %s\n", dlerror());
    return 1;
  }
  SYM(init_t, cuInit);
  SYM(devget_t, cuDeviceGet);
  SYM(retain_t, cuDevicePrimaryCtxRetain);
  SYM(setcur_t, cuCtxSetCurrent);
  SYM(modload_t, cuModuleLoadData);
  SYM(getfn_t, cuModuleGetFunction);
  SYM(screate_t, cuStreamCreate);
  SYM(launch_t, cuLaunchKernel);
  SYM(ssync_t, cuStreamSynchronize);
  SYM(csync_t, cuCtxSynchronize);
  SYM(gpa_t, cuGetProcAddress_v2);
  void* pt_export = dlsym(h, "cuLaunchKernel_ptsz");
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUmodule mod = NULL;
  CUfunction f = NULL;
  CUstream s = NULL;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&mod, kPtx));
  CK(cuModuleGetFunction(&f, mod, "ithbat_empty"));
  CK(cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));
  void* legacy = NULL;
  void* pt = NULL;
  int st = 0;
  CK(cuGetProcAddress_v2("cuLaunchKernel", &legacy, 4000, 0 /* default */, &st));
  CK(cuGetProcAddress_v2("cuLaunchKernel", &pt, 7000, 2 /* per-thread default stream */, &st));
  FILE* r = fopen(argv[3], "w");
  if (!r) return 2;
  fprintf(r, "%d\n", (int)getpid());
  fclose(r);
  if (!wait_for(argv[4])) return 2;

  long syncs = 0;
  for (long i = 0; i < n; ++i) {
    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CK(((launch_t)legacy)(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CK(((launch_t)pt)(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    if ((i + 1) % 100 == 0) {
      CK(cuStreamSynchronize(s));
      ++syncs;
    }
  }
  CK(cuCtxSynchronize());
  FILE* d = fopen(argv[5], "w");
  if (!d) return 2;
  /* What each call means by its exported name: the legacy pointer is cuLaunchKernel whatever its
   * address; the per-thread one is cuLaunchKernel_ptsz. */
  fprintf(d,
          "{\"pid\": %d, \"calls\": {\"cuLaunchKernel\": %ld, \"cuLaunchKernel_ptsz\": %ld, "
          "\"cuStreamSynchronize\": %ld, \"cuCtxSynchronize\": 1}, "
          "\"procaddr_legacy_is_export\": %s, \"procaddr_ptsz_is_export\": %s}\n",
          (int)getpid(), 2 * n, n, syncs, legacy == (void*)cuLaunchKernel ? "true" : "false",
          pt == pt_export ? "true" : "false");
  fclose(d);
  if (!wait_for(argv[6])) return 2;
  return 0;
}
