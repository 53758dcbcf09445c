/*
 * The CUDA runtime API on the CPU, for the emulator (emu.h): the calls
 * gpu/cuda, gpu/comm/comm_nccl.c, gpu/zero/zero_cuda.c and the GPU tests
 * make, under their real names (the programs built on the emulator link
 * this instead of libcudart), so that C code compiled unchanged calls it.
 *
 * The device: DAGRUN_EMU_DEVICES of them (default 1), each named "dagrun
 * CPU emulator", compute capability 9.0, DAGRUN_EMU_SMS multiprocessors
 * (default 4: the kernels size their grids and scratch by it) and
 * DAGRUN_EMU_DEVICE_MIB MiB of memory (default 16384), counted over every
 * device together: an allocation past it fails with
 * cudaErrorMemoryAllocation, as on a full card.
 *
 * Device memory is host memory (256-byte aligned, as cudaMalloc's) and
 * kernels run when launched (emu.h): every stream is the host thread, so
 * an asynchronous call has finished when it returns, events are always
 * complete and synchronizing waits for nothing. What is checked as a GPU
 * would fail it: a copy or memset must lie inside one allocation on the
 * device side (cudaErrorInvalidValue otherwise, with an EMU ERROR), and
 * cudaFree takes only what cudaMalloc gave. kernels_emulated, whose
 * "device" buffers are host vectors, turns the first check off
 * (emu_allow_host_pointers).
 *
 * Not modelled: concurrency between streams (nothing here overlaps, so a
 * missing wait between two streams goes unseen), pinned and managed
 * memory, peer access.
 */
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

static thread_local cudaError_t t_last_error = cudaSuccess;
static thread_local int t_device = 0;

/* A failed call's error, which cudaGetLastError reports once (per host
 * thread, as CUDA's). */
static cudaError_t failed(cudaError_t e) {
  t_last_error = e;
  return e;
}

void emu_set_last_error(cudaError_t e) { failed(e); }

static int env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : dflt;
}

static int devices(void) { return env_int("DAGRUN_EMU_DEVICES", 1); }

static size_t capacity(void) {
  return (size_t)env_int("DAGRUN_EMU_DEVICE_MIB", 16384) << 20;
}

/* ---- Device memory ---- */
static std::mutex g_mem_mu;
/* start -> bytes. Never destroyed: memory a program does not free before
 * it exits (as CUDA programs may) stays reachable for LeakSanitizer,
 * which looks after the static destructors have run. */
static std::map<const char *, size_t> &g_allocs =
    *new std::map<const char *, size_t>;
static size_t g_used;
static bool g_allow_host;

void emu_allow_host_pointers(bool allow) { g_allow_host = allow; }

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = nullptr;
  std::lock_guard<std::mutex> l(g_mem_mu);
  if (n > capacity() - g_used)
    return failed(cudaErrorMemoryAllocation);
  void *q = nullptr;
  if (posix_memalign(&q, 256, n ? n : 1) != 0)
    return failed(cudaErrorMemoryAllocation);
  /* Fresh device memory holds whatever was there: NaN bytes, so that a
   * read before a write shows. */
  memset(q, 0xff, n);
  g_allocs[(const char *)q] = n;
  g_used += n;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (!p)
    return cudaSuccess;
  std::lock_guard<std::mutex> l(g_mem_mu);
  auto it = g_allocs.find((const char *)p);
  if (it == g_allocs.end()) {
    emu_error("cudaFree(%p): not a pointer cudaMalloc returned", p);
    return failed(cudaErrorInvalidValue);
  }
  g_used -= it->second;
  g_allocs.erase(it);
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  std::lock_guard<std::mutex> l(g_mem_mu);
  *free_bytes = capacity() - g_used;
  *total = capacity();
  return cudaSuccess;
}

/* [p, p + n) inside one allocation (or, with emu_allow_host_pointers,
 * outside all of them). */
bool emu_device_range(const void *p, size_t n, const char *call) {
  std::lock_guard<std::mutex> l(g_mem_mu);
  const char *q = (const char *)p;
  auto it = g_allocs.upper_bound(q);
  if (it != g_allocs.begin()) {
    --it;
    if (q >= it->first && q < it->first + it->second) {
      if (n <= (size_t)(it->first + it->second - q))
        return true;
      emu_error("%s: %zu bytes at offset %zu of a %zu-byte allocation run "
                "past its end",
                call, n, (size_t)(q - it->first), it->second);
      return false;
    }
  }
  if (g_allow_host)
    return true;
  emu_error("%s: %p is not device memory", call, p);
  return false;
}

static bool copy_ok(void *dst, const void *src, size_t n,
                    cudaMemcpyKind kind, const char *call) {
  bool dst_dev = kind == cudaMemcpyHostToDevice ||
                 kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault;
  bool src_dev = kind == cudaMemcpyDeviceToHost ||
                 kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault;
  if (kind == cudaMemcpyDefault)
    return true; /* either side may be either: nothing to hold it to */
  return (!dst_dev || emu_device_range(dst, n, call)) &&
         (!src_dev || emu_device_range(src, n, call));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            cudaMemcpyKind kind, cudaStream_t) {
  if (n == 0)
    return cudaSuccess;
  if (!copy_ok(dst, src, n, kind, "cudaMemcpyAsync"))
    return failed(cudaErrorInvalidValue);
  memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                       cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, n, kind, 0);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
  if (n == 0)
    return cudaSuccess;
  if (!emu_device_range(p, n, "cudaMemset"))
    return failed(cudaErrorInvalidValue);
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
  return cudaMemsetAsync(p, v, n, 0);
}

/* ---- Devices ---- */
cudaError_t cudaGetDeviceCount(int *n) {
  *n = devices();
  return *n > 0 ? cudaSuccess : failed(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= devices())
    return failed(cudaErrorInvalidDevice);
  t_device = d;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
  *d = t_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int d) {
  if (d < 0 || d >= devices())
    return failed(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) {
    emu_error("cudaDeviceGetAttribute(%d): not emulated", (int)attr);
    return failed(cudaErrorInvalidValue);
  }
  *v = env_int("DAGRUN_EMU_SMS", 4);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
  if (d < 0 || d >= devices())
    return failed(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "dagrun CPU emulator");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = env_int("DAGRUN_EMU_SMS", 4);
  p->totalGlobalMem = capacity();
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

/* ---- Streams and events: the host thread's order ---- */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = (cudaStream_t)new char[1];
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  return cudaStreamCreateWithFlags(s, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete[](char *) s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
  *e = (cudaEvent_t)new char[1];
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete[](char *) e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

/* ---- Errors ---- */
cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  default: return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorNotReady: return "device not ready";
  default: return "unknown error";
  }
}
