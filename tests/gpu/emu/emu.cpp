/* emu's runtime (emu.h): launches as fibers, block and warp barriers,
 * shared memory poisoning, the checks a GPU would make. */
#include "emu.h"

#include <algorithm>
#include <random>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

EMU_TLS uint3 emu_threadIdx, emu_blockIdx;
EMU_TLS dim3 emu_blockDim, emu_gridDim;
static EMU_TLS int t_lin;        /* linear thread index in the block */
static EMU_TLS unsigned t_nshfl; /* shuffles of this thread's block */

static std::atomic<int> g_errors;

void emu_error(const char *fmt, ...) {
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

/* ---- One launch: a fiber per CUDA thread ----
 *
 * Each CUDA thread of a block is a fiber (its own stack, switched to and
 * from on the launching host thread): it runs until it reaches a
 * __syncthreads, a warp operation (shuffle, __syncwarp) or its end, and
 * then gives the host thread back. When no fiber can run, the scheduler
 * releases whatever can go on: a warp whose live lanes are all at a warp
 * operation (each lane gets its source lane's value), else the block when
 * all its live threads are at a __syncthreads. When neither can, the
 * threads wait for each other at different barriers (a GPU would hang):
 * an EMU ERROR, at once. The fibers that can run are run in an order
 * shuffled every time (seeded: DAGRUN_EMU_SEED, default 1), so that code
 * that depends on the order of threads between two barriers shows it.
 *
 * Switching, on x86-64, is emu_switch (below): the callee-saved
 * registers pushed on the stack being left, its stack pointer stored,
 * the other's loaded; no system call, no signal mask, and a fiber's first
 * entry is the same switch onto a stack prepared to return into
 * fiber_main. It replaced _setjmp/_longjmp (glibc's _longjmp walks the
 * thread's cancellation handlers at every switch) and makecontext /
 * setcontext (two sigprocmask system calls per fiber per launch), which
 * other machines still use. Under AddressSanitizer every switch is
 * announced to it (__sanitizer_*_switch_fiber). */
#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
#endif

enum fiber_state { F_RUN, F_SYNC, F_WARP, F_DONE };

/* What a switch and a warp operation touch comes first: a launch of 1024
 * threads switches through 1024 of these, and the fewer cache lines each
 * takes, the fewer misses. */
struct fiber {
#ifdef EMU_ASM_SWITCH
  void *sp = nullptr; /* its stack pointer while it is not running */
#else
  jmp_buf jb;
#endif
  fiber_state st = F_RUN;
  int line = 0;        /* the barrier's or warp operation's source line */
  unsigned nshfl = 0;  /* warp operations so far in this block */
  unsigned seq = 0;    /* the number of the one it waits at */
  unsigned mask = 0;
  int src = 0;
  uint64_t val = 0, result = 0;
  uint3 idx = {0, 0, 0}; /* its threadIdx */
  /* Its cp.async copies not yet landed, each with its group's number
   * (committed groups are 0 .. groups - 1; `groups` for those issued
   * since the last commit). */
  struct copy {
    char *dst;
    const char *src;
    int n;
    unsigned group;
  };
  std::vector<copy> copies;
  unsigned groups = 0;
  char *stack = nullptr; /* the lowest usable byte of its stack */
  size_t stack_size = 0;
#ifndef EMU_ASM_SWITCH
  bool started = false;
  ucontext_t uc;
#endif
#ifdef EMU_ASAN
  void *fake = nullptr;
#endif
};

#ifdef EMU_ASM_SWITCH
/* emu_switch(from, to): pushes rbp, rbx and r12-r15 (what the System V
 * ABI has a callee keep; MXCSR and the x87 control word too, but no
 * kernel or scheduler changes those), stores rsp in *from, loads `to`,
 * pops the same registers from there and returns to whatever that stack
 * holds: the place where it called emu_switch itself, or for a fresh
 * fiber, fiber_main (fiber_init). */
extern "C" void emu_switch(void **from, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl emu_switch\n"
        ".hidden emu_switch\n"
        ".type emu_switch, @function\n"
        "emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n");
#endif

/* Fiber stacks: 256 KiB (kernels keep fragments and reduction arrays on
 * theirs; the sanitizer's redzones double that), below each a guard page
 * so that an overflow faults instead of writing over its neighbour. Kept
 * for the next launch. Above the 256 KiB, COLOR_BYTES more, of which
 * fiber t leaves the top stack_color(t) unused: the stacks' tops would
 * otherwise all lie at the same offset in a page, in the same few cache
 * sets, and each switch would miss the cache on the stack it enters
 * (perf put a third of gpt_cuda_emulated's time on the first
 * instructions after a switch; this and emu_switch together took 30% off
 * its CPU time). */
static const size_t STACK_BYTES = 256 << 10, GUARD_BYTES = 4096,
                    COLOR_BYTES = 64 << 10;

/* 64 cache lines of one page, then 16 pages: under COLOR_BYTES, a
 * multiple of 64 (the stack's top stays 16-byte aligned). */
static size_t stack_color(int t) {
  return (size_t)(t % 64) * 64 + (size_t)(t / 64 % 16) * 4096;
}
static std::mutex g_stacks_mu;
static std::vector<char *> g_stacks;

static char *stack_get(void) {
  {
    std::lock_guard<std::mutex> l(g_stacks_mu);
    if (!g_stacks.empty()) {
      char *p = g_stacks.back();
      g_stacks.pop_back();
      return p;
    }
  }
  void *p = mmap(nullptr, STACK_BYTES + COLOR_BYTES + GUARD_BYTES,
                 PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    perror("emu: mmap of a fiber stack");
    abort();
  }
  mprotect(p, GUARD_BYTES, PROT_NONE);
  return (char *)p + GUARD_BYTES;
}

static void stack_put(char *p) {
  std::lock_guard<std::mutex> l(g_stacks_mu);
  g_stacks.push_back(p);
}

struct launch {
  dim3 g, b;
  int nt = 0;
  uint3 block = {0, 0, 0};
  std::vector<float> smem;
  size_t smem_bytes = 0;
  const std::function<void()> *body = nullptr;
  std::vector<fiber> f;
  std::vector<int> live, at_warp; /* [warp]: lanes live, lanes waiting */
  /* Each lane's registers for mma_bf16_16816 ([thread][6]: 4 of A, 2 of
   * B) and its row address for ldmatrix, by the thread's number in the
   * block. */
  std::vector<uint32_t> mma;
  std::vector<const unsigned short *> ldm;
#ifdef EMU_ASM_SWITCH
  void *sched_sp = nullptr;
#else
  jmp_buf sched;
#endif
  int cur = -1; /* the fiber running */
#ifdef EMU_ASAN
  const void *sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};

static EMU_TLS launch *g_launch;

/* From the running fiber back to the scheduler. */
/* Not inlined: a caller holding _setjmp would have its locals clobbered. */
__attribute__((noinline)) static void yield_to_scheduler(launch *L) {
  fiber &f = L->f[L->cur];
#ifdef EMU_ASM_SWITCH
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&f.fake, L->sched_bottom, L->sched_size);
#endif
  emu_switch(&f.sp, L->sched_sp);
#else
  if (_setjmp(f.jb) == 0) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&f.fake, L->sched_bottom, L->sched_size);
#endif
    _longjmp(L->sched, 1);
  }
#endif
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake, nullptr, nullptr);
#endif
}

static void set_thread_index(const launch *L, int t) {
  t_lin = t;
  emu_threadIdx = L->f[t].idx;
  emu_blockIdx = L->block;
  emu_blockDim = L->b;
  emu_gridDim = L->g;
}

/* A fiber's life: one run of the kernel per block, until the launch ends
 * (the scheduler does not resume it after the last block). */
static void fiber_main(void) {
  launch *L = g_launch;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &L->sched_bottom, &L->sched_size);
#endif
  for (;;) {
    (*L->body)();
    L->f[L->cur].st = F_DONE;
    yield_to_scheduler(L);
  }
}

/* A fresh fiber for thread t of L's blocks, which enters fiber_main.
 * Not inlined: getcontext returns twice, as _setjmp does. */
__attribute__((noinline)) static void fiber_init(const launch *L, fiber *f,
                                                 int t) {
  f->idx = {(unsigned)(t % L->b.x), (unsigned)(t / L->b.x % L->b.y),
            (unsigned)(t / (L->b.x * L->b.y))};
  f->stack = stack_get();
  f->stack_size = STACK_BYTES + COLOR_BYTES - stack_color(t);
#ifdef EMU_ASM_SWITCH
  /* What emu_switch pops: six registers (zero: rbp ends the frame chain
   * for debuggers), then its return address, fiber_main; above it a null
   * return address for fiber_main, which never returns, at a stack
   * pointer that is 8 past a multiple of 16, as at any function's entry
   * (the top is 16-byte aligned). */
  void **sp = (void **)(f->stack + f->stack_size);
  *--sp = nullptr;
  *--sp = (void *)fiber_main;
  for (int i = 0; i < 6; i++)
    *--sp = nullptr;
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiber_main, 0);
#endif
}

/* From the scheduler into fiber t, until it yields. */
__attribute__((noinline)) static void resume(launch *L, int t) {
  fiber &f = L->f[t];
  L->cur = t;
  set_thread_index(L, t);
  t_nshfl = f.nshfl;
#ifdef EMU_ASM_SWITCH
#ifdef EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, f.stack_size);
#endif
  emu_switch(&L->sched_sp, f.sp);
#else
  if (_setjmp(L->sched) == 0) {
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, f.stack_size);
#endif
    if (!f.started) {
      f.started = true;
      setcontext(&f.uc);
    }
    _longjmp(f.jb, 1);
  }
#endif
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  f.nshfl = t_nshfl;
  L->cur = -1;
}

void emu_syncthreads(int line) {
  launch *L = g_launch;
  fiber &f = L->f[L->cur];
  f.st = F_SYNC;
  f.line = line;
  yield_to_scheduler(L);
}

int emu_lane(void) { return t_lin % 32; }

uint64_t emu_shfl_bits(unsigned mask, uint64_t bits, int src, int line) {
  launch *L = g_launch;
  fiber &f = L->f[L->cur];
  f.st = F_WARP;
  f.line = line;
  f.seq = t_nshfl++;
  f.mask = mask;
  f.src = src & 31;
  f.val = bits;
  yield_to_scheduler(L);
  return f.result;
}

static float bf16_half(uint32_t reg, int k) {
  const unsigned short u = (unsigned short)(reg >> (16 * (k % 2)));
  return __bfloat162float(__ushort_as_bfloat16(u));
}

void emu_mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2],
                        int line) {
  const int lane = emu_lane(), base = t_lin - lane;
  /* The launch's, one thread's at a time: its fibers run on the
   * launching thread, one at a time. */
  std::vector<uint32_t> &mma = g_launch->mma;
  if (mma.empty())
    mma.resize((size_t)g_launch->nt * 6);
  uint32_t(*t_mma)[6] = reinterpret_cast<uint32_t(*)[6]>(mma.data());
  memcpy(t_mma[t_lin], a, 4 * sizeof(uint32_t));
  memcpy(t_mma[t_lin] + 4, b, 2 * sizeof(uint32_t));
  emu_shfl_bits(0xffffffffu, 0, lane, line); /* every lane's are in */
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int e = 0; e < 4; e++) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float acc = c[e];
    for (int k = 0; k < 16; k++) {
      /* A (row, k): lane 4 (row % 8) + (k % 8) / 2, register
       * (row >= 8) + 2 (k >= 8); B (k, col): lane 4 col + (k % 8) / 2,
       * register 4 + (k >= 8); the lower k in the low half. */
      const uint32_t *la = t_mma[base + 4 * (row % 8) + (k % 8) / 2];
      const uint32_t *lb = t_mma[base + 4 * col + (k % 8) / 2];
      acc += bf16_half(la[(row >= 8) + 2 * (k >= 8)], k) *
             bf16_half(lb[4 + (k >= 8)], k);
    }
    out[e] = acc;
  }
  emu_shfl_bits(0xffffffffu, 0, lane, line); /* every lane has read */
  memcpy(c, out, sizeof out);
}

/* Warp w, every live lane at a warp operation: each lane named in a mask
 * must be at the same one (same number in the block, same line). Its
 * lanes get their values and go on the run queue. */
static void release_warp(launch *L, int w, std::vector<int> &runq) {
  fiber *lane = &L->f[(size_t)w * 32];
  /* The usual case first: every waiting lane at the same operation, each
   * mask naming only waiting lanes. */
  unsigned waiting = 0, masks = 0;
  bool same = true;
  int first = -1;
  for (int l = 0; l < 32; l++)
    if (lane[l].st == F_WARP) {
      if (first < 0)
        first = l;
      waiting |= 1u << l;
      masks |= lane[l].mask;
      same &= lane[l].seq == lane[first].seq && lane[l].line == lane[first].line;
    }
  for (int l = 0; l < 32 && !(same && (masks & ~waiting) == 0); l++) {
    if (lane[l].st != F_WARP)
      continue;
    for (int m = 0; m < 32; m++)
      if ((lane[l].mask >> m & 1u) &&
          (lane[m].st != F_WARP || lane[m].seq != lane[l].seq ||
           lane[m].line != lane[l].line)) {
        emu_error("block (%u,%u,%u) warp %d: lane %d's shuffle at line %d "
                  "names lane %d, which has exited or is at another shuffle",
                  L->block.x, L->block.y, L->block.z, w, l, lane[l].line, m);
        emu_fatal();
      }
  }
  for (int l = 0; l < 32; l++)
    if (lane[l].st == F_WARP) {
      lane[l].result = lane[lane[l].src].val;
      lane[l].st = F_RUN;
      runq.push_back(w * 32 + l);
    }
  L->at_warp[w] = 0;
}

/* Nothing can run and threads still live: all of them at one
 * __syncthreads (released onto runq), or stuck. */
static void release_block(launch *L, std::vector<int> &runq) {
  int sync = -1, other = -1, warp = -1;
  for (int t = 0; t < L->nt; t++) {
    const fiber &f = L->f[t];
    if (f.st == F_WARP && warp < 0)
      warp = t;
    if (f.st == F_SYNC && sync < 0)
      sync = t;
    else if (f.st == F_SYNC && f.line != L->f[sync].line && other < 0)
      other = t;
  }
  if (warp >= 0 || other >= 0) {
    /* A warp operation can only be stuck beside a __syncthreads. */
    int a = warp >= 0 ? warp : sync, b = warp >= 0 ? sync : other;
    emu_error("block (%u,%u,%u): thread %d at the %s of line %d, thread %d "
              "at the __syncthreads of line %d (a barrier in divergent "
              "code: they wait for each other)",
              L->block.x, L->block.y, L->block.z, a,
              warp >= 0 ? "warp operation" : "__syncthreads", L->f[a].line, b,
              L->f[b].line);
    emu_fatal();
  }
  for (int t = 0; t < L->nt; t++)
    if (L->f[t].st == F_SYNC) {
      L->f[t].st = F_RUN;
      runq.push_back(t);
    }
}

/* splitmix64: the fibers' order, cheap enough to draw every phase. */
struct emu_rng {
  typedef uint64_t result_type;
  uint64_t s;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return ~(uint64_t)0; }
  uint64_t operator()() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

/* One block: the fibers that can run, in a shuffled order, until none
 * can; then the block's __syncthreads. A warp is released as soon as its
 * last live lane reaches the warp operation (or exits). */
static void run_block(launch *L, emu_rng &rng) {
  std::vector<int> runq, next;
  for (int t = 0; t < L->nt; t++) {
    L->f[t].st = F_RUN;
    L->f[t].nshfl = 0;
    /* Copies a thread of the last block left in flight at its end land
     * nowhere: its shared memory is the next block's. */
    L->f[t].copies.clear();
    L->f[t].groups = 0;
    runq.push_back(t);
  }
  std::fill(L->live.begin(), L->live.end(), 32);
  std::fill(L->at_warp.begin(), L->at_warp.end(), 0);
  int live = L->nt;
  for (;;) {
    std::shuffle(runq.begin(), runq.end(), rng);
    for (int t : runq) {
      resume(L, t);
      const int w = t / 32;
      if (L->f[t].st == F_WARP && ++L->at_warp[w] == L->live[w]) {
        release_warp(L, w, next);
      } else if (L->f[t].st == F_DONE) {
        live--;
        if (--L->live[w] > 0 && L->at_warp[w] == L->live[w])
          release_warp(L, w, next);
      }
    }
    runq.clear();
    if (next.empty()) {
      if (live == 0)
        return;
      release_block(L, next);
    }
    std::swap(runq, next);
  }
}

/* Between blocks: poisoned shared memory. */
static void poison_shared(launch *L) {
  if (L->smem_bytes)
    poison(L->smem.data(), L->smem_bytes);
  std::lock_guard<std::mutex> l(g_shared_mu);
  for (const shared_region &r : g_shared)
    poison(r.p, r.n);
}

static uint64_t order_seed(void) {
  const char *s = getenv("DAGRUN_EMU_SEED");
  return s && *s ? strtoull(s, nullptr, 10) : 1;
}

float *emu_dyn_smem(void) { return g_launch->smem.data(); }

void emu_ldmatrix_x4(uint32_t r[4], const void *p, bool trans, int line) {
  const int lane = emu_lane(), base = t_lin - lane;
  const char *sm = (const char *)g_launch->smem.data(), *q = (const char *)p;
  /* In the dynamic shared memory: the offset from its start (aligned to
   * 128 on the GPU); elsewhere the address itself. */
  const uintptr_t at = q >= sm && q < sm + g_launch->smem_bytes
                           ? (uintptr_t)(q - sm)
                           : (uintptr_t)q;
  if (at % 16)
    emu_error("ldmatrix at line %d: lane %d's row address %p is not 16-byte "
              "aligned (offset %lu)",
              line, lane, p, (unsigned long)at);
  std::vector<const unsigned short *> &t_ldm = g_launch->ldm;
  if (t_ldm.empty())
    t_ldm.resize(g_launch->nt);
  t_ldm[t_lin] = (const unsigned short *)p;
  emu_shfl_bits(0xffffffffu, 0, lane, line); /* every lane's address is in */
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++) {
    const unsigned short *const *rows = &t_ldm[base + 8 * i];
    const unsigned short lo = trans ? rows[2 * t][g] : rows[g][2 * t];
    const unsigned short hi = trans ? rows[2 * t + 1][g] : rows[g][2 * t + 1];
    r[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
  emu_shfl_bits(0xffffffffu, 0, lane, line); /* every lane has read */
}

/* cp.async: the copy lands when its thread waits for its group, not
 * when issued: a thread that reads the destination before waiting (and
 * other threads before the barrier after the wait) sees what was there
 * before, as it may on the GPU. The source is read then too. */
void emu_cp_async16(void *dst, const void *src, int src_bytes) {
  fiber &f = g_launch->f[t_lin];
  if ((uintptr_t)dst % 16 || (src_bytes && (uintptr_t)src % 16))
    emu_error("cp.async of 16 bytes: dst %p or src %p not 16-byte aligned", dst,
              src);
  f.copies.push_back({(char *)dst, (const char *)src, src_bytes, f.groups});
}

void emu_cp_async_commit(void) { g_launch->f[t_lin].groups++; }

void emu_cp_async_wait(int n) {
  fiber &f = g_launch->f[t_lin];
  std::vector<fiber::copy> left;
  for (const fiber::copy &c : f.copies) {
    if (c.group + (unsigned)n >= f.groups) { /* a newer group, or none */
      left.push_back(c);
      continue;
    }
    memset(c.dst, 0, 16);
    memcpy(c.dst, c.src, (size_t)c.n);
  }
  f.copies.swap(left);
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
  L.smem_bytes = c.smem;
  L.smem.resize((c.smem + sizeof(float) - 1) / sizeof(float));
  L.body = &body;
  L.f.resize(L.nt);
  for (int t = 0; t < L.nt; t++)
    fiber_init(&L, &L.f[t], t);
  launch *outer = g_launch;
  g_launch = &L;
  static thread_local emu_rng rng{order_seed()};
  L.live.resize(L.nt / 32);
  L.at_warp.resize(L.nt / 32);
  const unsigned long long nblocks = (unsigned long long)c.g.x * c.g.y * c.g.z;
  for (unsigned long long i = 0; i < nblocks; i++) {
    L.block = {(unsigned)(i % c.g.x), (unsigned)(i / c.g.x % c.g.y),
               (unsigned)(i / ((unsigned long long)c.g.x * c.g.y))};
    poison_shared(&L);
    run_block(&L, rng);
  }
  g_launch = outer;
  for (fiber &f : L.f)
    stack_put(f.stack);
}
