/* emu's runtime (emu.h): launches as OS threads, block and warp barriers,
 * shared memory poisoning, the checks a GPU would make. */
#include "emu.h"

#include <array>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

thread_local uint3 emu_threadIdx, emu_blockIdx;
thread_local dim3 emu_blockDim, emu_gridDim;
static thread_local int t_lin;        /* linear thread index in the block */
static thread_local unsigned t_nshfl; /* shuffles of this thread's block */

static std::atomic<int> g_errors;

static void emu_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void emu_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("EMU ERROR: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  g_errors++;
}

int emu_errors(void) { return g_errors.load(); }

/* After threads met at different barriers, the block cannot go on as a
 * GPU's would (it would hang or be undefined): the program stops, failed,
 * rather than hang until the test's timeout. */
[[noreturn]] static void emu_fatal(void) {
  printf("EMU ERROR: stopping: the block cannot go on\n");
  fflush(stdout);
  _exit(1);
}

/* ---- Shared memory registry ---- */
struct shared_region {
  void *p;
  size_t n;
};
static std::mutex g_shared_mu;
static std::vector<shared_region> g_shared;

/* 0xff bytes: a NaN as a float (and -1 as an int). */
static void poison(void *p, size_t n) { memset(p, 0xff, n); }

emu_shared_reg::emu_shared_reg(void *p, size_t n) {
  poison(p, n);
  std::lock_guard<std::mutex> l(g_shared_mu);
  g_shared.push_back({p, n});
}

/* ---- One launch ---- */

/* Called by the last thread to arrive at a __syncthreads, before any
 * leaves: every thread still running must be at the same one. */
struct sync_check {
  struct launch *L;
  void operator()() noexcept;
};

struct launch {
  dim3 g, b;
  int nt = 0;
  unsigned long long nblocks = 0, next = 0;
  uint3 block = {0, 0, 0};
  std::vector<float> smem;
  size_t smem_bytes = 0;
  /* Per block (rebuilt between blocks, when no thread is inside one). */
  std::unique_ptr<std::barrier<sync_check>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> wbar;
  /* [warp][parity][lane]: a shuffle's values, in two buffers used in
   * turn, so that one barrier phase a shuffle is enough: a lane can only
   * write the buffer again after every lane has passed the next phase,
   * that is, has read it. */
  std::vector<std::array<std::array<uint64_t, 32>, 2>> wbuf;
  /* [warp][parity][lane]: the number, in its block, of the shuffle each
   * lane last wrote there (~0u: none yet), and its source line. */
  std::vector<std::array<std::array<unsigned, 32>, 2>> wseq;
  std::vector<std::array<std::array<int, 32>, 2>> wline;
  std::vector<int> line;                      /* [thread]: its __syncthreads */
  std::unique_ptr<std::atomic<bool>[]> alive; /* [thread] */
  std::atomic<bool> reported{false};          /* one report a launch */

  void setup_block() noexcept;
};

void sync_check::operator()() noexcept {
  int first = -1;
  for (int t = 0; t < L->nt; t++) {
    if (!L->alive[t].load())
      continue;
    if (first < 0) {
      first = t;
    } else if (L->line[t] != L->line[first] && !L->reported.exchange(true)) {
      emu_error("block (%u,%u,%u): thread %d at the __syncthreads of line "
                "%d, thread %d at line %d (a barrier in divergent code)",
                L->block.x, L->block.y, L->block.z, first, L->line[first], t,
                L->line[t]);
      emu_fatal();
    }
  }
}

/* Between blocks: fresh barriers, poisoned shared memory, the next
 * block's index (x fastest). */
void launch::setup_block() noexcept {
  unsigned long long i = next++;
  block = {(unsigned)(i % g.x), (unsigned)(i / g.x % g.y),
           (unsigned)(i / ((unsigned long long)g.x * g.y))};
  bar = std::make_unique<std::barrier<sync_check>>(nt, sync_check{this});
  for (auto &w : wbar)
    w = std::make_unique<std::barrier<>>(32);
  for (int t = 0; t < nt; t++)
    alive[t].store(true);
  for (auto &w : wseq)
    for (auto &p : w)
      p.fill(~0u);
  if (smem_bytes)
    poison(smem.data(), smem_bytes);
  std::lock_guard<std::mutex> l(g_shared_mu);
  for (const shared_region &r : g_shared)
    poison(r.p, r.n);
}

static launch *g_launch;

void emu_syncthreads(int line) {
  launch *L = g_launch;
  L->line[t_lin] = line;
  L->bar->arrive_and_wait();
}

int emu_lane(void) { return t_lin % 32; }

uint64_t emu_shfl_bits(unsigned mask, uint64_t bits, int src, int line) {
  launch *L = g_launch;
  const int w = t_lin / 32, lane = t_lin % 32;
  const unsigned n = t_nshfl++;
  auto &buf = L->wbuf[w][n & 1];
  auto &seq = L->wseq[w][n & 1];
  auto &at = L->wline[w][n & 1];
  buf[lane] = bits;
  seq[lane] = n;
  at[lane] = line;
  L->wbar[w]->arrive_and_wait();
  /* Every lane of the mask must be at this same shuffle: one that has
   * exited (it dropped out of the warp's barrier) or that is at another
   * shuffle did not write this number. */
  for (int l = 0; l < 32; l++)
    if ((mask >> l & 1u) && (seq[l] != n || at[l] != line) &&
        !L->reported.exchange(true)) {
      emu_error("block (%u,%u,%u) warp %d: lane %d's shuffle at line %d "
                "names lane %d, which has exited or is at another shuffle",
                L->block.x, L->block.y, L->block.z, w, lane, line, l);
      emu_fatal();
    }
  return buf[src & 31];
}

float *emu_dyn_smem(void) { return g_launch->smem.data(); }

void emu_wmma_check(const void *p, unsigned ldm_bytes, int line) {
  const char *base = (const char *)g_launch->smem.data(), *q = (const char *)p;
  /* In the dynamic shared memory: the offset from its start (aligned to
   * 128 on the GPU); elsewhere the address itself. */
  if (emu_lane() != 0) /* every lane makes the same call: one reports */
    return;
  uintptr_t at = q >= base && q < base + g_launch->smem_bytes
                     ? (uintptr_t)(q - base)
                     : (uintptr_t)q;
  if (at % 32)
    emu_error("wmma: pointer %p not 32-byte aligned (offset %lu)", p,
              (unsigned long)at);
  if (ldm_bytes % 16)
    emu_error("wmma: leading dimension of %u bytes, not a multiple of 16",
              ldm_bytes);
  (void)line;
}

/* ---- Launch configuration, as the GPU checks it ---- */
static std::map<const void *, int> g_max_dyn_smem;

cudaError_t emu_func_set_attribute(const void *fn, cudaFuncAttribute attr,
                                   int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 227 * 1024) {
      emu_set_last_error(cudaErrorInvalidValue);
      return cudaErrorInvalidValue;
    }
    g_max_dyn_smem[fn] = value;
  }
  return cudaSuccess;
}

static bool config_ok(const void *fn, const emu_cfg_t &c) {
  unsigned long long nt = (unsigned long long)c.b.x * c.b.y * c.b.z;
  size_t smem_max = 48 * 1024;
  auto it = g_max_dyn_smem.find(fn);
  if (it != g_max_dyn_smem.end() && (size_t)it->second > smem_max)
    smem_max = (size_t)it->second;
  const char *why = nullptr;
  if (nt == 0 || nt > 1024 || c.b.z > 64)
    why = "block size";
  else if (c.g.x == 0 || c.g.y == 0 || c.g.z == 0 || c.g.x > 0x7fffffffu ||
           c.g.y > 65535 || c.g.z > 65535)
    why = "grid size";
  else if (c.smem > smem_max)
    why = "dynamic shared memory over the kernel's limit";
  if (why) {
    emu_error("launch refused (%s): grid (%u,%u,%u) block (%u,%u,%u) "
              "dynamic shared memory %zu bytes (limit %zu)",
              why, c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z, c.smem, smem_max);
    emu_set_last_error(cudaErrorInvalidConfiguration);
    return false;
  }
  if (nt % 32) {
    /* Legal on a GPU (a partial last warp), but this emulator's warps
     * are whole: refuse rather than emulate it wrongly. */
    emu_error("block of %llu threads: not a multiple of 32, not emulated", nt);
    emu_set_last_error(cudaErrorInvalidConfiguration);
    return false;
  }
  return true;
}

void emu_run(const void *fn, emu_cfg_t c, const std::function<void()> &body) {
  if (!config_ok(fn, c))
    return;
  launch L;
  L.g = c.g;
  L.b = c.b;
  L.nt = (int)(c.b.x * c.b.y * c.b.z);
  L.nblocks = (unsigned long long)c.g.x * c.g.y * c.g.z;
  L.smem_bytes = c.smem;
  L.smem.resize((c.smem + sizeof(float) - 1) / sizeof(float));
  L.wbar.resize(L.nt / 32);
  L.wbuf.resize(L.nt / 32);
  L.wseq.resize(L.nt / 32);
  L.wline.resize(L.nt / 32);
  L.line.assign(L.nt, 0);
  L.alive = std::make_unique<std::atomic<bool>[]>(L.nt);
  g_launch = &L;

  /* The threads are made once per launch and walk the blocks together:
   * the barrier between blocks sets up the next one. */
  struct next_block {
    launch *L;
    void operator()() noexcept {
      if (L->next < L->nblocks)
        L->setup_block();
    }
  };
  std::barrier<next_block> between(L.nt, next_block{&L});
  std::mutex done_mu;
  std::condition_variable done_cv;
  int ndone = 0;
  std::vector<std::thread> th;
  th.reserve(L.nt);
  for (int t = 0; t < L.nt; t++)
    th.emplace_back([&, t] {
      t_lin = t;
      emu_threadIdx = {(unsigned)(t % L.b.x), (unsigned)(t / L.b.x % L.b.y),
                       (unsigned)(t / (L.b.x * L.b.y))};
      emu_blockDim = L.b;
      emu_gridDim = L.g;
      for (unsigned long long i = 0; i < L.nblocks; i++) {
        between.arrive_and_wait();
        emu_blockIdx = L.block;
        t_nshfl = 0;
        body();
        /* Exited: the block's barriers stop waiting for this thread, as
         * a GPU's do for exited threads. */
        L.alive[t].store(false);
        L.bar->arrive_and_drop();
        L.wbar[t / 32]->arrive_and_drop();
      }
      std::lock_guard<std::mutex> l(done_mu);
      if (++ndone == L.nt)
        done_cv.notify_one();
    });
  {
    /* A launch takes seconds at most here: one that has not finished
     * after 120 s has threads waiting for each other at different
     * barriers (say a __syncthreads and a shuffle), as a GPU would hang. */
    std::unique_lock<std::mutex> l(done_mu);
    if (!done_cv.wait_for(l, std::chrono::seconds(120),
                          [&] { return ndone == L.nt; })) {
      emu_error("a launch (grid (%u,%u,%u) block (%u,%u,%u)) has not "
                "finished after 120 s: its threads wait at different "
                "barriers",
                c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z);
      emu_fatal();
    }
  }
  for (auto &x : th)
    x.join();
  g_launch = nullptr;
}
