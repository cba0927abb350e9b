/* ge.ops._native: whole float32 conv kernels in one C call -- Winograd F(2x2,3x3) and
 * F(4x4,3x3) (input transform, one GEMM per transform point, output transform with bias,
 * residual and ReLU), im2col convs with the same epilogue, and 2-D max pooling.
 *
 * Why: the numpy path spends ~28 ms of a ResNet-50 forward outside its GEMMs (Winograd
 * transforms as whole-array passes, im2col copies, bias/residual/ReLU passes, temporaries);
 * here each kernel reads its input once and writes its output once.  The GEMMs: our own,
 * on weights packed once at load ("our own GEMM" below), or numpy's own OpenBLAS (Python
 * hands us its cblas_sgemm address, ge/ops/openblas.py, once, through set_sgemm).  Optional: if this file does not build, ge/ops/native.py reports it
 * unavailable and the numpy path runs (ARCHITECTURE.md, "ge/ops/csrc").
 *
 * Portability: plain C99 + GCC vector extensions (8 float lanes, lowered to whatever the
 * target has); the hot loops are cloned for AVX-512 and AVX2 and picked at load time on
 * x86-64 (target_clones), never -march=native, so no CPU gets an instruction it lacks.
 *
 * Safety: every array comes in through the buffer protocol as C-contiguous float32; its
 * length must equal the size the integer arguments give (the work area: at least), every
 * dimension must lie in [1, 2^31) (pads in [0, 2^31)) and every size product is checked for
 * overflow before it is compared with a buffer; reads outside x are zeros, never loads. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(ATC_NO_CLONES)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#define INLINE static inline __attribute__((always_inline))

#define LANES 8
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));

/* -- OpenBLAS's cblas_sgemm, from numpy's own library --------------------------------- */

typedef void (*sgemm32_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                           float *, int);
typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                           int64_t, float, float *, int64_t);
static void *g_sgemm = NULL;
static int g_ilp64 = 0;
enum { ROW_MAJOR = 101, NO_TRANS = 111 };

/* bench/bench_simulator.py --split: CPU seconds spent inside sgemm while profiling is on */
static int g_profile = 0;
static double g_gemm_seconds = 0.0;

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sgemm_call(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float beta, float *c, int64_t ldc);

/* C (m x n, row stride ldc) = A (m x k) B (k x n) + beta C, row-major, no transposes. */
static void sgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    if (!g_profile) {
        sgemm_call(m, n, k, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    double t0 = cpu_seconds();
    sgemm_call(m, n, k, a, lda, b, ldb, beta, c, ldc);
    g_gemm_seconds += cpu_seconds() - t0;
}

static void sgemm_call(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float beta, float *c, int64_t ldc) {
    if (g_ilp64)
        ((sgemm64_fn)g_sgemm)(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    else
        ((sgemm32_fn)g_sgemm)(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                              (int)ldb, beta, c, (int)ldc);
}

static PyObject *set_sgemm(PyObject *self, PyObject *args) {
    unsigned long long address;
    int ilp64;
    if (!PyArg_ParseTuple(args, "Kp", &address, &ilp64))
        return NULL;
    g_sgemm = (void *)(uintptr_t)address;
    g_ilp64 = ilp64;
    Py_RETURN_NONE;
}

static PyObject *gemm_profile(PyObject *self, PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
    g_profile = on;
    return PyFloat_FromDouble(g_gemm_seconds);
}

/* -- argument checks ------------------------------------------------------------------- */

#define DIM_MAX ((int64_t)1 << 31)

/* A C-contiguous float32 buffer of exactly `count` elements (at least, if `at_least`). */
static int get_floats(PyObject *obj, Py_buffer *view, int64_t count, int writable, int at_least, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if ((f[0] == '<' || f[0] == '=' || f[0] == '@') && f[1])
        f++;
    if (view->itemsize != 4 || strcmp(f, "f") != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be float32", name);
        PyBuffer_Release(view);
        return -1;
    }
    int64_t have = (int64_t)(view->len / 4);
    if (at_least ? have < count : have != count) {
        PyErr_Format(PyExc_ValueError, "%s holds %lld floats, the shape needs %s%lld", name, (long long)have,
                     at_least ? "at least " : "", (long long)count);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* An optional operand: None (view->buf stays NULL) or a buffer as get_floats. */
static int get_optional(PyObject *obj, Py_buffer *view, int64_t count, const char *name) {
    memset(view, 0, sizeof(*view));
    if (obj == Py_None)
        return 0;
    return get_floats(obj, view, count, 0, 0, name);
}

static void release(Py_buffer *view) {
    if (view->obj != NULL)
        PyBuffer_Release(view);
}

/* Each value in [lo, 2^31); products of them are formed with safe_mul before any use. */
static int check_dims(const int64_t *values, const int64_t *lows, int count) {
    for (int i = 0; i < count; i++)
        if (values[i] < lows[i] || values[i] >= DIM_MAX) {
            PyErr_Format(PyExc_ValueError, "argument %d out of range: %lld", i, (long long)values[i]);
            return -1;
        }
    return 0;
}

static int need_sgemm(void) {
    if (g_sgemm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_sgemm was not called");
        return -1;
    }
    return 0;
}

/* a * b, or INT64_MAX when it overflows: no buffer holds that many floats, so the size
 * check that follows fails instead of comparing a wrapped product */
static int64_t safe_mul(int64_t a, int64_t b) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return INT64_MAX;
    return r;
}

static int64_t safe_mul3(int64_t a, int64_t b, int64_t c) { return safe_mul(safe_mul(a, b), c); }

static int64_t safe_mul4(int64_t a, int64_t b, int64_t c, int64_t d) { return safe_mul(safe_mul(a, b), safe_mul(c, d)); }

/* -- our own GEMM for prepacked conv weights ------------------------------------------------
 *
 * Why: OpenBLAS packs both operands on every call, and a forward re-packs ~100 MB of conv
 * weights (12% of a ResNet-50 forward, bench/RESULTS.md); it has no API to keep a packed
 * operand.  Here the constant operand A (the weights, M x K: C_out rows) is packed once at
 * load (pack_weights, kept by ge/ops/native.py) into the layout the micro-kernel reads, and
 * only B (the activations, K x N) is packed per call, in blocks that stay in cache.
 *
 * Layout of packed A: K split into KC blocks; each block holds ceil(M/MR) panels of kc x MR
 * floats (k-major, rows past M zero).  Packed B: nc/NR panels of kc x NR (the last panel
 * NR or, when at most 8 columns remain, 8 wide; columns past N zero).  The micro-kernel
 * keeps an MR x NR tile of C in 12 vector registers (2 per row) and per k broadcasts MR
 * values of A against one NR-wide row of B.  Loops (BLIS): N in NC blocks, K in KC blocks
 * (B block packed, L3), M in MC blocks (A block, L2), B micro-panel (L1) against every A
 * panel of the block.
 *
 * Kernels: AVX2 + FMA only (chosen at run time by __builtin_cpu_supports, never
 * -march=native); without them, or without packed weights, the conv kernels call
 * OpenBLAS's sgemm as before. */

#define GEMM_MR 6
#define GEMM_NR 16
#ifndef GEMM_KC                 /* (overridable with -D to try other blockings) */
#define GEMM_KC 256
#endif
#ifndef GEMM_MC
#define GEMM_MC 96              /* multiple of MR: an A block of 96 x 256 floats, 96 KB (L2) */
#endif
#ifndef GEMM_NC
#define GEMM_NC 1024            /* multiple of NR: a B block of 256 x 1024 floats, 1 MB */
#endif

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

static int g_own_gemm = -1;     /* -1: not decided; 0: OpenBLAS; 1: the AVX2/FMA kernel */

static int own_gemm_ready(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (g_own_gemm < 0) {
        __builtin_cpu_init();
        g_own_gemm = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
#else
    g_own_gemm = 0;
#endif
    return g_own_gemm;
}

static int64_t packed_floats(int64_t m, int64_t k) { return safe_mul3((m + GEMM_MR - 1) / GEMM_MR, GEMM_MR, k); }

/* A (m x k, rows lda apart) -> ap in the packed layout above. */
static void pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *ap) {
    const int64_t panels = (m + GEMM_MR - 1) / GEMM_MR;
    for (int64_t pc = 0; pc < k; pc += GEMM_KC) {
        const int64_t kc = k - pc < GEMM_KC ? k - pc : GEMM_KC;
        for (int64_t i = 0; i < panels; i++)
            for (int64_t kk = 0; kk < kc; kk++)
                for (int r = 0; r < GEMM_MR; r++) {
                    const int64_t row = i * GEMM_MR + r;
                    *ap++ = row < m ? a[row * lda + pc + kk] : 0.0f;
                }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OWN_TARGET __attribute__((target("avx2,fma")))

/* B rows [0, kc), columns [0, nc) (rows ldb apart) -> NR-wide panels (8 for a last one of
 * at most 8 columns), zeros past nc. */
OWN_TARGET static void pack_b(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp) {
    for (int64_t j0 = 0; j0 < nc; j0 += GEMM_NR) {
        const int64_t w = nc - j0 < GEMM_NR ? nc - j0 : GEMM_NR;
        const float *src = b + j0;
        if (w == GEMM_NR) {
            for (int64_t kk = 0; kk < kc; kk++, src += ldb, bp += GEMM_NR) {
                *(v8 *)bp = *(const v8u *)src;
                *(v8 *)(bp + 8) = *(const v8u *)(src + 8);
            }
        } else {
            const int width = w <= 8 ? 8 : GEMM_NR;
            for (int64_t kk = 0; kk < kc; kk++, src += ldb, bp += width) {
                int q = 0;
                for (; q < w; q++) bp[q] = src[q];
                for (; q < width; q++) bp[q] = 0.0f;
            }
        }
    }
}

/* one float in all lanes: vbroadcastss from memory (a vector literal compiles to inserts) */
#define bcast(f) ((v8)_mm256_broadcast_ss(&(f)))

/* C[0..MR)[0..8*nv) (rows ldc apart) = A panel x B panel over kc (+ src, a tile ldc apart:
 * C itself or the base) (+ bias[row]), ReLU'd (NaN kept) if relu. */
OWN_TARGET INLINE void micro_kernel(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                    const float *src, const float *bias, int relu, const int nv) {
    v8 r0 = {0}, r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0}, r5 = {0};
    v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0};
    for (int64_t k = 0; k < kc; k++, a += GEMM_MR, b += 8 * nv) {
        const v8 b0 = *(const v8 *)b;
        const v8 b1 = nv == 2 ? *(const v8 *)(b + 8) : b0;
        v8 x;
        x = bcast(a[0]); r0 += x * b0; if (nv == 2) s0 += x * b1;
        x = bcast(a[1]); r1 += x * b0; if (nv == 2) s1 += x * b1;
        x = bcast(a[2]); r2 += x * b0; if (nv == 2) s2 += x * b1;
        x = bcast(a[3]); r3 += x * b0; if (nv == 2) s3 += x * b1;
        x = bcast(a[4]); r4 += x * b0; if (nv == 2) s4 += x * b1;
        x = bcast(a[5]); r5 += x * b0; if (nv == 2) s5 += x * b1;
    }
    v8 *rows[GEMM_MR] = {&r0, &r1, &r2, &r3, &r4, &r5}, *rows2[GEMM_MR] = {&s0, &s1, &s2, &s3, &s4, &s5};
    for (int i = 0; i < GEMM_MR; i++) {
        v8 lo = *rows[i], hi = *rows2[i];
        if (src) {
            const v8u *from = (const v8u *)(src + i * ldc);
            lo += from[0];
            if (nv == 2) hi += from[1];
        }
        if (bias) {
            lo += bcast(bias[i]);
            if (nv == 2) hi += bcast(bias[i]);
        }
        if (relu) {             /* max(0, v): v when v is NaN */
            lo = (v8)_mm256_max_ps((__m256){0}, (__m256)lo);
            if (nv == 2) hi = (v8)_mm256_max_ps((__m256){0}, (__m256)hi);
        }
        v8u *d = (v8u *)(c + i * ldc);
        d[0] = lo;
        if (nv == 2) d[1] = hi;
    }
}

OWN_TARGET static void kernel16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const float *src,
                                const float *bias, int relu) {
    micro_kernel(kc, a, b, c, ldc, src, bias, relu, 2);
}

OWN_TARGET static void kernel8(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const float *src,
                               const float *bias, int relu) {
    micro_kernel(kc, a, b, c, ldc, src, bias, relu, 1);
}

/* C (m x n, rows ldc apart) = A x B (+ C if beta is 1, else + base) (+ bias[row]), ReLU'd if
 * relu: the epilogue in the kernel's stores, no pass over C of its own.  A packed by pack_a
 * (m x k); B and base rows ldb and ldc apart (base may be C itself).  bp: NC * KC floats of
 * 32-byte aligned scratch. */
OWN_TARGET static void own_gemm(int64_t m, int64_t n, int64_t k, const float *ap, const float *b, int64_t ldb,
                                float beta, float *c, int64_t ldc, float *bp, const float *bias, const float *base,
                                int relu) {
    const int64_t panels = (m + GEMM_MR - 1) / GEMM_MR;
    float edge[GEMM_MR * GEMM_NR] __attribute__((aligned(32)));
    for (int64_t jc = 0; jc < n; jc += GEMM_NC) {
        const int64_t nc = n - jc < GEMM_NC ? n - jc : GEMM_NC;
        for (int64_t pc = 0; pc < k; pc += GEMM_KC) {
            const int64_t kc = k - pc < GEMM_KC ? k - pc : GEMM_KC;
            const int first = pc == 0, last = pc + kc >= k, rl = last && relu;
            /* what the first K block adds: C (beta 1) or the base; later blocks add C */
            const float *addend = !first || beta != 0.0f ? c : base;
            pack_b(kc, nc, b + pc * ldb + jc, ldb, bp);
            const float *ablock = ap + pc * panels * GEMM_MR;
            for (int64_t i0 = 0; i0 < panels; i0 += GEMM_MC / GEMM_MR) {
                const int64_t i1 = panels - i0 < GEMM_MC / GEMM_MR ? panels : i0 + GEMM_MC / GEMM_MR;
                for (int64_t j0 = 0; j0 < nc; j0 += GEMM_NR) {
                    const int64_t w = nc - j0 < GEMM_NR ? nc - j0 : GEMM_NR;
                    const int narrow = w <= 8;
                    const float *bpanel = bp + j0 * kc;
                    for (int64_t i = i0; i < i1; i++) {
                        const float *apanel = ablock + i * kc * GEMM_MR;
                        const int64_t row0 = i * GEMM_MR, rows = m - row0 < GEMM_MR ? m - row0 : GEMM_MR;
                        const int64_t at = row0 * ldc + jc + j0;
                        const float *src = addend ? addend + at : NULL, *bs = first && bias ? bias + row0 : NULL;
                        float *ct = c + at;
                        if (rows == GEMM_MR && w == (narrow ? 8 : GEMM_NR)) {
                            if (narrow) kernel8(kc, apanel, bpanel, ct, ldc, src, bs, rl);
                            else kernel16(kc, apanel, bpanel, ct, ldc, src, bs, rl);
                            continue;
                        }
                        if (narrow) kernel8(kc, apanel, bpanel, edge, GEMM_NR, NULL, NULL, 0);
                        else kernel16(kc, apanel, bpanel, edge, GEMM_NR, NULL, NULL, 0);
                        for (int64_t r = 0; r < rows; r++)
                            for (int64_t q = 0; q < w; q++) {
                                float v = edge[r * GEMM_NR + q];
                                if (src) v += src[r * ldc + q];
                                if (bs) v += bs[r];
                                ct[r * ldc + q] = rl && v < 0.0f ? 0.0f : v;
                            }
                    }
                }
            }
        }
    }
}
#else
static void own_gemm(int64_t m, int64_t n, int64_t k, const float *ap, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc, float *bp, const float *bias, const float *base, int relu) {
    (void)m; (void)n; (void)k; (void)ap; (void)b; (void)ldb; (void)beta; (void)c; (void)ldc; (void)bp;
    (void)bias; (void)base; (void)relu;
}
#endif

/* The scratch own_gemm packs B into: one per thread (kernels run with the GIL released),
 * allocated on first use and kept, 1 MB. */
static __thread float *g_bp = NULL;

static float *b_scratch(void) {
    if (g_bp == NULL)
        g_bp = aligned_alloc(64, (size_t)GEMM_NC * GEMM_KC * sizeof(float));
    return g_bp;
}

static void own_gemm_timed(int64_t m, int64_t n, int64_t k, const float *ap, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc, float *bp, const float *bias, const float *base,
                           int relu) {
    if (!g_profile) {
        own_gemm(m, n, k, ap, b, ldb, beta, c, ldc, bp, bias, base, relu);
        return;
    }
    double t0 = cpu_seconds();
    own_gemm(m, n, k, ap, b, ldb, beta, c, ldc, bp, bias, base, relu);
    g_gemm_seconds += cpu_seconds() - t0;
}

/* C = A B + beta C with A given packed (ap, own_gemm) or plain (a, OpenBLAS). */
static void gemm_either(int64_t m, int64_t n, int64_t k, const float *ap, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc, float *bp) {
    if (ap == NULL || bp == NULL) {
        sgemm(m, n, k, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    own_gemm_timed(m, n, k, ap, b, ldb, beta, c, ldc, bp, NULL, NULL, 0);
}


/* Packed weights: None (OpenBLAS on the plain weights) or `count` floats from pack_weights;
 * then *bp is this thread's B scratch.  Packed weights on a CPU without the kernel: an error
 * (ge/ops/native.py packs only where own_gemm_available()). */
static int get_packed(PyObject *obj, Py_buffer *view, int64_t count, float **bp) {
    memset(view, 0, sizeof(*view));
    *bp = NULL;
    if (obj == Py_None)
        return 0;
    if (!own_gemm_ready()) {
        PyErr_SetString(PyExc_RuntimeError, "packed weights need the AVX2/FMA GEMM kernel");
        return -1;
    }
    if (get_floats(obj, view, count, 0, 0, "packed") < 0)
        return -1;
    if ((*bp = b_scratch()) == NULL) {
        PyBuffer_Release(view);
        memset(view, 0, sizeof(*view));
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *own_gemm_available(PyObject *self, PyObject *args) { return PyBool_FromLong(own_gemm_ready()); }

static int check_mk(long long count, long long m, long long k) {
    int64_t vals[] = {count, m, k}, lows[] = {1, 1, 1};
    if (check_dims(vals, lows, 3) < 0)
        return -1;
    if (safe_mul(count, packed_floats(m, k)) >= INT64_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "weights too large");
        return -1;
    }
    return 0;
}

static PyObject *packed_size(PyObject *self, PyObject *args) {
    long long m, k;
    if (!PyArg_ParseTuple(args, "LL", &m, &k) || check_mk(1, m, k) < 0)
        return NULL;
    return PyLong_FromLongLong(packed_floats(m, k));
}

static PyObject *pack_weights(PyObject *self, PyObject *args) {
    PyObject *wo, *outo;
    long long count, m, k;
    if (!PyArg_ParseTuple(args, "OLLLO", &wo, &count, &m, &k, &outo) || check_mk(count, m, k) < 0)
        return NULL;
    Py_buffer w, out;
    if (get_floats(wo, &w, safe_mul3(count, m, k), 0, 0, "w") < 0)
        return NULL;
    const int64_t size = packed_floats(m, k);
    if (get_floats(outo, &out, safe_mul(count, size), 1, 0, "out") < 0) {
        release(&w);
        return NULL;
    }
    const float *wb = (const float *)w.buf;
    float *ob = (float *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < count; i++)
        pack_a(m, k, wb + i * m * k, k, ob + i * size);
    Py_END_ALLOW_THREADS
    release(&w);
    release(&out);
    Py_RETURN_NONE;
}

/* gemm_packed(ap, m, k, b, n, c, beta): c (m x n) = A b + beta c, A packed by pack_weights
 * (tests/test_native_conv.py checks the kernel against numpy on edge sizes). */
static PyObject *gemm_packed(PyObject *self, PyObject *args) {
    PyObject *apo, *bo, *co;
    long long m, k, n;
    int accumulate;
    if (!PyArg_ParseTuple(args, "OLLOLOp", &apo, &m, &k, &bo, &n, &co, &accumulate) || check_mk(1, m, k) < 0)
        return NULL;
    int64_t vals[] = {n}, lows[] = {1};
    if (check_dims(vals, lows, 1) < 0)
        return NULL;
    Py_buffer ap, b, c;
    float *bp;
    if (get_packed(apo, &ap, packed_floats(m, k), &bp) < 0)
        return NULL;
    if (ap.buf == NULL) {
        PyErr_SetString(PyExc_TypeError, "ap must be packed weights");
        return NULL;
    }
    if (get_floats(bo, &b, safe_mul(k, n), 0, 0, "b") < 0) {
        release(&ap);
        return NULL;
    }
    if (get_floats(co, &c, safe_mul(m, n), 1, 0, "c") < 0) {
        release(&ap); release(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    gemm_either(m, n, k, (const float *)ap.buf, NULL, k, (const float *)b.buf, n, accumulate ? 1.0f : 0.0f,
                (float *)c.buf, n, bp);
    Py_END_ALLOW_THREADS
    release(&ap); release(&b); release(&c);
    Py_RETURN_NONE;
}

/* -- Winograd transforms, 8 tiles of one tile row at a time ------------------------------ */

/* 1-D input transforms B^T d of 4 (F2) or 6 (F4) lanes-vectors, stride s between them. */
static inline void bt_f2(vf *d, int s) {
    vf d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s];
    d[0] = d0 - d2;
    d[s] = d1 + d2;
    d[2 * s] = d2 - d1;
    d[3 * s] = d1 - d3;
}

static inline void bt_f4(vf *d, int s) {
    vf d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    vf p = (d3 + d4) - 4.0f * (d1 + d2), q = (d4 - d3) + 4.0f * (d1 - d2);
    vf r = d4 - d2, t = 2.0f * (d3 - d1);
    d[0] = 4.0f * d0 - 5.0f * d2 + d4;
    d[s] = p;
    d[2 * s] = q;
    d[3 * s] = r + t;
    d[4 * s] = r - t;
    d[5 * s] = 4.0f * d1 - 5.0f * d3 + d5;
}

/* Output transforms A^T m: 4 -> 2 (F2), 6 -> 4 (F4), from stride s to stride o. */
static inline void at_f2(const vf *m, int s, vf *out, int o) {
    vf m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s];
    out[0] = m0 + m1 + m2;
    out[o] = m1 - m2 - m3;
}

static inline void at_f4(const vf *m, int s, vf *out, int o) {
    vf m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s], m4 = m[4 * s], m5 = m[5 * s];
    vf sa = m1 + m2, da = m1 - m2, sb = m3 + m4, db = m3 - m4;
    out[0] = m0 + sa + sb;
    out[o] = da + 2.0f * db;
    out[2 * o] = sa + 4.0f * sb;
    out[3 * o] = da + 8.0f * db + m5;
}

typedef struct {
    int64_t n, c, h, w, cout, oh, ow, pt, pl, m, th, tw, tiles;
} WinoGeom;

/* A block: up to LANES tiles side by side in one row of tiles (image nb, tile row ty, tile
 * columns tx0 ..); tiles are numbered t = (nb * th + ty) * tw + tx, the GEMMs' column. */

/* V[p][ci][t] (p < a*a) = (B^T d B)[p] of input tile t of channel ci, zero outside x.  One
 * channel at a time, its tiles in order, so each of the a*a rows of V is written front to
 * back.  A block's a input rows are first copied into `strip` with the zeros of the padding
 * around them, so the gather into lanes has no bounds to check. */
#define STRIP (LANES * 4 + 2)
INLINE void wino_input_m(const WinoGeom *g, const float *x, float *v, const int m) {
    const int a = m + 2, aa = a * a;
    const int64_t T = g->tiles, hw = g->h * g->w;
    vf d[36];
    float strip[6][STRIP];
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t nb = 0; nb < g->n; nb++) {
            const float *plane = x + (nb * g->c + ci) * hw;
            for (int64_t ty = 0; ty < g->th; ty++)
                for (int64_t tx0 = 0; tx0 < g->tw; tx0 += LANES) {
                    const int lanes = (int)(g->tw - tx0 < LANES ? g->tw - tx0 : LANES);
                    const int64_t iy0 = ty * m - g->pt, ix0 = tx0 * m - g->pl, t0 = (nb * g->th + ty) * g->tw + tx0;
                    const int width = (lanes - 1) * m + a;
                    int lo = 0, hi = width;                    /* strip columns [lo, hi) lie inside x */
                    while (lo < width && ix0 + lo < 0) lo++;
                    while (hi > lo && ix0 + hi - 1 >= g->w) hi--;
                    for (int i = 0; i < a; i++) {
                        const int64_t yy = iy0 + i;
                        float *row = strip[i];
                        if (yy < 0 || yy >= g->h) {
                            for (int q = 0; q < STRIP; q++) row[q] = 0.0f;
                            continue;
                        }
                        const float *src = plane + yy * g->w + ix0;
                        for (int q = 0; q < lo; q++) row[q] = 0.0f;
                        for (int q = lo; q < hi; q++) row[q] = src[q];
                        for (int q = hi; q < STRIP; q++) row[q] = 0.0f;
                    }
                    for (int i = 0; i < a; i++)
                        for (int j = 0; j < a; j++)
                            for (int l = 0; l < LANES; l++)
                                d[i * a + j][l] = strip[i][l * m + j];
                    for (int j = 0; j < a; j++) {              /* B^T d: down each column */
                        if (m == 2) bt_f2(d + j, a); else bt_f4(d + j, a);
                    }
                    for (int i = 0; i < a; i++) {              /* (B^T d) B: along each row */
                        if (m == 2) bt_f2(d + i * a, 1); else bt_f4(d + i * a, 1);
                    }
                    float *dst = v + ci * T + t0;
                    if (lanes == LANES)
                        for (int p = 0; p < aa; p++)
                            for (int l = 0; l < LANES; l++)
                                dst[p * g->c * T + l] = d[p][l];
                    else
                        for (int p = 0; p < aa; p++)
                            for (int l = 0; l < lanes; l++)
                                dst[p * g->c * T + l] = d[p][l];
                }
        }
}

/* y = A^T M A (+ bias) (+ base), ReLU'd if relu, cropped to (oh, ow). */
INLINE void wino_output_m(const WinoGeom *g, const float *mm, const float *bias, const float *base, int relu,
                          float *y, const int m) {
    const int a = m + 2, aa = a * a;
    const int64_t T = g->tiles;
    vf s[36], r[24], o[16];
    for (int64_t nb = 0; nb < g->n; nb++)
        for (int64_t co = 0; co < g->cout; co++) {
            const float b = bias ? bias[co] : 0.0f;
            const int64_t plane = (nb * g->cout + co) * g->oh * g->ow;
            for (int64_t ty = 0; ty < g->th; ty++) {
                const int64_t oy0 = ty * m, rows = g->oh - oy0 < m ? g->oh - oy0 : m;
                for (int64_t tx0 = 0; tx0 < g->tw; tx0 += LANES) {
                    const int lanes = (int)(g->tw - tx0 < LANES ? g->tw - tx0 : LANES);
                    const float *src = mm + co * T + (nb * g->th + ty) * g->tw + tx0;
                    if (lanes == LANES)
                        for (int p = 0; p < aa; p++)
                            for (int l = 0; l < LANES; l++)
                                s[p][l] = src[p * g->cout * T + l];
                    else
                        for (int p = 0; p < aa; p++) {
                            s[p] = (vf){0};
                            for (int l = 0; l < lanes; l++)
                                s[p][l] = src[p * g->cout * T + l];
                        }
                    for (int j = 0; j < a; j++) {          /* A^T M: down each column -> r (m x a) */
                        if (m == 2) at_f2(s + j, a, r + j, a); else at_f4(s + j, a, r + j, a);
                    }
                    for (int i = 0; i < m; i++) {          /* (A^T M) A: along each row -> o (m x m) */
                        if (m == 2) at_f2(r + i * a, 1, o + i * m, 1); else at_f4(r + i * a, 1, o + i * m, 1);
                    }
                    const int64_t ox0 = tx0 * m;
                    const int cols = (int)(g->ow - ox0 < (int64_t)lanes * m ? g->ow - ox0 : (int64_t)lanes * m);
                    for (int i = 0; i < rows; i++) {
                        const int64_t at = plane + (oy0 + i) * g->ow + ox0;
                        float row[LANES * 4];
                        for (int l = 0; l < LANES; l++)
                            for (int j = 0; j < m; j++)
                                row[l * m + j] = o[i * m + j][l] + b;
                        float *dst = y + at;
                        const float *res = base ? base + at : NULL;
                        for (int k = 0; k < cols && k < LANES * m; k++) {
                            float val = res ? row[k] + res[k] : row[k];
                            dst[k] = relu && val < 0.0f ? 0.0f : val;          /* NaN stays, as np.maximum */
                        }
                    }
                }
            }
        }
}

CLONES static void wino_input2(const WinoGeom *g, const float *x, float *v) { wino_input_m(g, x, v, 2); }
CLONES static void wino_input4(const WinoGeom *g, const float *x, float *v) { wino_input_m(g, x, v, 4); }
CLONES static void wino_output2(const WinoGeom *g, const float *mm, const float *bias, const float *base, int relu,
                                float *y) { wino_output_m(g, mm, bias, base, relu, y, 2); }
CLONES static void wino_output4(const WinoGeom *g, const float *mm, const float *bias, const float *base, int relu,
                                float *y) { wino_output_m(g, mm, bias, base, relu, y, 4); }

static PyObject *winograd3x3(PyObject *self, PyObject *args) {
    PyObject *xo, *uo, *biaso, *baseo, *yo, *worko, *packedo = Py_None;
    long long n, c, h, w, cout, m, pt, pl, oh, ow;
    int relu;
    if (!PyArg_ParseTuple(args, "OLLLLOLLLLLLOOpOO|O", &xo, &n, &c, &h, &w, &uo, &cout, &m, &pt, &pl, &oh, &ow,
                          &biaso, &baseo, &relu, &yo, &worko, &packedo))
        return NULL;
    if (m != 2 && m != 4) {
        PyErr_SetString(PyExc_ValueError, "m must be 2 or 4");
        return NULL;
    }
    int64_t vals[] = {n, c, h, w, cout, pt, pl, oh, ow}, lows[] = {1, 1, 1, 1, 1, 0, 0, 1, 1};
    if (check_dims(vals, lows, 9) < 0 || need_sgemm() < 0)
        return NULL;
    WinoGeom g = {n, c, h, w, cout, oh, ow, pt, pl, m, (oh + m - 1) / m, (ow + m - 1) / m, 0};
    g.tiles = safe_mul3(n, g.th, g.tw);
    const int64_t aa = (m + 2) * (m + 2);
    if (g.tiles >= DIM_MAX || safe_mul3(aa, cout, c) >= DIM_MAX || safe_mul3(aa, c, g.tiles) >= INT64_MAX / 4
        || safe_mul3(aa, cout, g.tiles) >= INT64_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "conv too large");
        return NULL;
    }
    Py_buffer x, u, bias, base, y, work, packed;
    memset(&u, 0, sizeof u); memset(&bias, 0, sizeof bias); memset(&base, 0, sizeof base);
    memset(&y, 0, sizeof y); memset(&work, 0, sizeof work); memset(&packed, 0, sizeof packed);
    PyObject *result = NULL;
    float *bp = NULL;
    const int64_t upanel = packed_floats(cout, c);
    int64_t vsize = safe_mul3(aa, c, g.tiles), msize = safe_mul3(aa, cout, g.tiles);
    if (get_floats(xo, &x, safe_mul4(n, c, h, w), 0, 0, "x") < 0)
        return NULL;
    if (get_packed(packedo, &packed, safe_mul(aa, upanel), &bp) < 0
        || (packed.buf == NULL ? get_floats(uo, &u, aa * cout * c, 0, 0, "u") : get_optional(uo, &u, aa * cout * c, "u")) < 0
        || get_optional(biaso, &bias, cout, "bias") < 0
        || get_optional(baseo, &base, safe_mul4(n, cout, oh, ow), "base") < 0
        || get_floats(yo, &y, safe_mul4(n, cout, oh, ow), 1, 0, "y") < 0
        || get_floats(worko, &work, vsize + msize, 1, 1, "work") < 0)
        goto done;
    {
        float *v = (float *)work.buf, *mm = v + vsize;
        const float *ub = (const float *)u.buf, *pk = (const float *)packed.buf;
        Py_BEGIN_ALLOW_THREADS
        if (m == 2) wino_input2(&g, (const float *)x.buf, v); else wino_input4(&g, (const float *)x.buf, v);
        for (int64_t p = 0; p < aa; p++)
            gemm_either(cout, g.tiles, c, pk ? pk + p * upanel : NULL, ub ? ub + p * cout * c : NULL, c,
                        v + p * c * g.tiles, g.tiles, 0.0f, mm + p * cout * g.tiles, g.tiles, bp);
        if (m == 2)
            wino_output2(&g, mm, (const float *)bias.buf, (const float *)base.buf, relu, (float *)y.buf);
        else
            wino_output4(&g, mm, (const float *)bias.buf, (const float *)base.buf, relu, (float *)y.buf);
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&x); release(&u); release(&bias); release(&base); release(&y); release(&work); release(&packed);
    return result;
}

/* -- im2col convs ------------------------------------------------------------------------ */

typedef struct {
    int64_t c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
} ColGeom;

/* cols[(ci, ki, kj)][(oy - oy0) * ow + ox] = x[ci][oy*sh - pt + ki*dh][ox*sw - pl + kj*dw] for
 * the output rows oy0 .. oy0 + rows - 1, 0 outside x. */
CLONES static void im2col(const ColGeom *g, const float *x, float *cols, int64_t oy0, int64_t rows) {
    const int64_t p = rows * g->ow;
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                float *row = cols + ((ci * g->kh + ki) * g->kw + kj) * p;
                const float *plane = x + ci * g->h * g->w;
                /* the output columns whose input column is inside: ox in [lo, hi) */
                int64_t off = kj * g->dw - g->pl, lo = 0, hi = g->ow;
                while (lo < g->ow && lo * g->sw + off < 0) lo++;
                while (hi > lo && (hi - 1) * g->sw + off >= g->w) hi--;
                for (int64_t r = 0; r < rows; r++) {
                    float *dst = row + r * g->ow;
                    int64_t iy = (oy0 + r) * g->sh - g->pt + ki * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        for (int64_t ox = 0; ox < g->ow; ox++) dst[ox] = 0.0f;
                        continue;
                    }
                    const float *src = plane + iy * g->w + off;
                    for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
                    if (g->sw == 1)
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox];
                    else if (g->sw == 2)
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[2 * ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * g->sw];
                    for (int64_t ox = hi; ox < g->ow; ox++) dst[ox] = 0.0f;
                }
            }
}

/* y[co][0 .. n) = base[co][0 .. n) + bias[co], rows ld apart (either may be absent; returns
 * whether y holds anything). */
CLONES static int prefill(float *y, int64_t cout, int64_t n, int64_t ld, const float *bias, const float *base) {
    if (!bias && !base)
        return 0;
    for (int64_t co = 0; co < cout; co++) {
        float b = bias ? bias[co] : 0.0f, *dst = y + co * ld;
        const float *src = base ? base + co * ld : NULL;
        if (src)
            for (int64_t i = 0; i < n; i++) dst[i] = src[i] + b;
        else
            for (int64_t i = 0; i < n; i++) dst[i] = b;
    }
    return 1;
}

CLONES static void relu_rows(float *y, int64_t cout, int64_t n, int64_t ld) {
    for (int64_t co = 0; co < cout; co++) {
        float *row = y + co * ld;
        for (int64_t i = 0; i < n; i++)
            row[i] = row[i] < 0.0f ? 0.0f : row[i];      /* NaN stays NaN, as np.maximum(y, 0) */
    }
}

/* Output rows per GEMM: an im2col conv with small weights over a large map (ResNet's stem)
 * runs as column blocks whose im2col rows stay in L2 between im2col writing them and the
 * GEMM reading them; repacking its small weights per block costs little (the stem: 2.76 ms
 * against 2.94 in one GEMM).  Others, and the 1x1 convs that read x in place, run one GEMM
 * over the whole map (blocks made ResNet's 1x1 convs at 56x56 2-5% slower). */
#define BLOCK_WEIGHTS (64 * 1024)        /* floats of weights up to which blocks pay */
#define BLOCK_BYTES (768 * 1024)         /* im2col rows + output of one block */
#define BLOCK_MIN_COLS 256               /* narrower GEMMs lose more than the cache saves */

static int64_t rows_per_block(int64_t cout, int64_t k, int64_t oh, int64_t ow) {
    if (cout * k > BLOCK_WEIGHTS)
        return oh;
    int64_t cols = BLOCK_BYTES / (4 * (k + cout)), rows = cols / ow;
    if (rows * ow < BLOCK_MIN_COLS)
        rows = (BLOCK_MIN_COLS + ow - 1) / ow;
    return rows < 1 ? 1 : rows > oh ? oh : rows;
}

static PyObject *conv_gemm(PyObject *self, PyObject *args) {
    PyObject *xo, *wo, *biaso, *baseo, *yo, *worko, *packedo = Py_None;
    long long n, c, h, w, cout, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
    int relu;
    if (!PyArg_ParseTuple(args, "OLLLLOLLLLLLLLLLLOOpOO|O", &xo, &n, &c, &h, &w, &wo, &cout, &kh, &kw, &sh, &sw,
                          &dh, &dw, &pt, &pl, &oh, &ow, &biaso, &baseo, &relu, &yo, &worko, &packedo))
        return NULL;
    int64_t vals[] = {n, c, h, w, cout, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow};
    int64_t lows[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    if (check_dims(vals, lows, 15) < 0 || need_sgemm() < 0)
        return NULL;
    const int64_t k = safe_mul3(c, kh, kw), p = safe_mul(oh, ow);
    if (k >= DIM_MAX || p >= DIM_MAX || safe_mul(k, p) >= INT64_MAX / 4 || safe_mul(cout, k) >= INT64_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "conv too large");
        return NULL;
    }
    /* a 1x1 stride-1 unpadded conv reads x as its GEMM operand in place */
    const int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w;
    Py_buffer x, wt, bias, base, y, work, packed;
    memset(&wt, 0, sizeof wt); memset(&bias, 0, sizeof bias); memset(&base, 0, sizeof base);
    memset(&y, 0, sizeof y); memset(&work, 0, sizeof work); memset(&packed, 0, sizeof packed);
    PyObject *result = NULL;
    float *bp = NULL;
    if (get_floats(xo, &x, safe_mul4(n, c, h, w), 0, 0, "x") < 0)
        return NULL;
    if (get_packed(packedo, &packed, packed_floats(cout, k), &bp) < 0
        || (packed.buf == NULL ? get_floats(wo, &wt, safe_mul(cout, k), 0, 0, "w")
                               : get_optional(wo, &wt, safe_mul(cout, k), "w")) < 0
        || get_optional(biaso, &bias, cout, "bias") < 0
        || get_optional(baseo, &base, safe_mul3(n, cout, p), "base") < 0
        || get_floats(yo, &y, safe_mul3(n, cout, p), 1, 0, "y") < 0
        || get_floats(worko, &work, direct ? 0 : safe_mul(k, p), 1, 1, "work") < 0)      /* a whole map: any block fits */
        goto done;
    {
        ColGeom g = {c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow};
        const float *xb = (const float *)x.buf, *bb = (const float *)base.buf;
        float *yb = (float *)y.buf, *cols = (float *)work.buf;
        Py_BEGIN_ALLOW_THREADS
        const int64_t rows = direct ? oh : rows_per_block(cout, k, oh, ow);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = xb + i * c * h * w, *basei = bb ? bb + i * cout * p : NULL;
            float *yi = yb + i * cout * p;
            for (int64_t oy0 = 0; oy0 < oh; oy0 += rows) {
                const int64_t r = oh - oy0 < rows ? oh - oy0 : rows, at = oy0 * ow, n_cols = r * ow;
                if (!direct)
                    im2col(&g, xi, cols, oy0, r);
                const float *bcols = direct ? xi + at : cols;
                const int64_t ldb = direct ? p : n_cols;
                if (packed.buf) {          /* bias, base and ReLU in the GEMM's stores */
                    own_gemm_timed(cout, n_cols, k, (const float *)packed.buf, bcols, ldb, 0.0f, yi + at, p, bp,
                                   (const float *)bias.buf, basei ? basei + at : NULL, relu);
                    continue;
                }
                int acc = prefill(yi + at, cout, n_cols, p, (const float *)bias.buf, basei ? basei + at : NULL);
                sgemm(cout, n_cols, k, (const float *)wt.buf, k, bcols, ldb, acc ? 1.0f : 0.0f, yi + at, p);
                if (relu)
                    relu_rows(yi + at, cout, n_cols, p);
            }
        }
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&x); release(&wt); release(&bias); release(&base); release(&y); release(&work); release(&packed);
    return result;
}

/* -- max pooling -------------------------------------------------------------------------- */

typedef struct {
    int64_t h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
} PoolGeom;

/* The taps k in [0, taps) of a window row or column at base + k * step that lie in [0, size):
 * [*first, *last), by arithmetic -- a window may be far wider than x (pads just below a huge
 * kernel), and its cost must be the taps inside. */
static inline void taps_inside(int64_t base, int64_t step, int64_t taps, int64_t size, int64_t *first,
                               int64_t *last) {
    int64_t a = base < 0 ? (step - 1 - base) / step : 0;
    int64_t b = base < size ? (size - 1 - base) / step + 1 : 0;
    a = a < taps ? a : taps;
    b = b < taps ? b : taps;
    *first = a;
    *last = b > a ? b : a;
}

/* y = max over each window, taps in window order, a tap replacing the running max only when
 * greater (ONNX's reference: a window is NaN when its first tap is, else its NaNs are
 * ignored); taps outside x are -inf (padding never wins). */
CLONES static void max_pool_plane(const PoolGeom *g, const float *x, float *y) {
    /* output columns whose every tap column is inside: [lo, hi) */
    int64_t lo = 0, hi = g->ow;
    while (lo < g->ow && lo * g->sw - g->pl < 0) lo++;
    while (hi > lo && (hi - 1) * g->sw - g->pl + (g->kw - 1) * g->dw >= g->w) hi--;
    for (int64_t oy = 0; oy < g->oh; oy++) {
        float *dst = y + oy * g->ow;
        const int64_t iy0 = oy * g->sh - g->pt;
        int64_t ki0, ki1;                           /* the window rows inside x */
        taps_inside(iy0, g->dh, g->kh, g->h, &ki0, &ki1);
        const int full_rows = ki0 == 0 && ki1 == g->kh;
        if (full_rows && lo < hi) {      /* interior columns: tap by tap over the whole run (vectorizes) */
            const float *base = x + iy0 * g->w - g->pl;
            for (int64_t ki = 0; ki < g->kh; ki++)
                for (int64_t kj = 0; kj < g->kw; kj++) {
                    const float *src = base + ki * g->dh * g->w + kj * g->dw;
                    if (ki == 0 && kj == 0) {
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * g->sw];
                    } else if (g->sw == 2) {
                        for (int64_t ox = lo; ox < hi; ox++) {
                            const float v = src[2 * ox];
                            dst[ox] = v > dst[ox] ? v : dst[ox];
                        }
                    } else {
                        for (int64_t ox = lo; ox < hi; ox++) {
                            const float v = src[ox * g->sw];
                            dst[ox] = v > dst[ox] ? v : dst[ox];
                        }
                    }
                }
        }
        for (int64_t ox = 0; ox < g->ow; ox++) {
            if (full_rows && ox == lo && lo < hi) {
                ox = hi - 1;                              /* done above */
                continue;
            }
            const int64_t ix0 = ox * g->sw - g->pl;
            int64_t kj0, kj1;
            taps_inside(ix0, g->dw, g->kw, g->w, &kj0, &kj1);
            /* only the taps inside x: one outside is -inf, which never replaces the running
             * max -- unless it is the window's first tap, which starts it at -inf */
            float m = -INFINITY;
            int first = ki0 == 0 && kj0 == 0;
            for (int64_t ki = ki0; ki < ki1; ki++)
                for (int64_t kj = kj0; kj < kj1; kj++) {
                    const float v = x[(iy0 + ki * g->dh) * g->w + ix0 + kj * g->dw];
                    m = first || v > m ? v : m;
                    first = 0;
                }
            dst[ox] = m;
        }
    }
}

static PyObject *max_pool2d(PyObject *self, PyObject *args) {
    PyObject *xo, *yo;
    long long planes, h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
    if (!PyArg_ParseTuple(args, "OLLLLLLLLLLLLLO", &xo, &planes, &h, &w, &kh, &kw, &sh, &sw, &dh, &dw, &pt, &pl, &oh,
                          &ow, &yo))
        return NULL;
    int64_t vals[] = {planes, h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow};
    int64_t lows[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    if (check_dims(vals, lows, 13) < 0)
        return NULL;
    Py_buffer x, y;
    if (get_floats(xo, &x, safe_mul3(planes, h, w), 0, 0, "x") < 0)
        return NULL;
    if (get_floats(yo, &y, safe_mul3(planes, oh, ow), 1, 0, "y") < 0) {
        release(&x);
        return NULL;
    }
    PoolGeom g = {h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow};
    const float *xb = (const float *)x.buf;
    float *yb = (float *)y.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < planes; i++)
        max_pool_plane(&g, xb + i * h * w, yb + i * oh * ow);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"max_pool2d", max_pool2d, METH_VARARGS,
     "max_pool2d(x, planes, h, w, kh, kw, sh, sw, dh, dw, pad_top, pad_left, oh, ow, y)"},
    {"own_gemm_available", own_gemm_available, METH_NOARGS,
     "own_gemm_available() -> whether this CPU runs the prepacked-weights GEMM (AVX2 + FMA)."},
    {"packed_size", packed_size, METH_VARARGS, "packed_size(m, k) -> floats pack_weights writes per m x k matrix."},
    {"pack_weights", pack_weights, METH_VARARGS,
     "pack_weights(w, count, m, k, out): count m x k matrices into the GEMM's packed layout."},
    {"gemm_packed", gemm_packed, METH_VARARGS, "gemm_packed(ap, m, k, b, n, c, accumulate): c = A b (+ c)."},
    {"set_sgemm", set_sgemm, METH_VARARGS, "set_sgemm(address, ilp64): the cblas_sgemm every kernel calls."},
    {"gemm_profile", gemm_profile, METH_VARARGS,
     "gemm_profile(on) -> CPU seconds spent in sgemm so far while profiling was on; switches it."},
    {"winograd3x3", winograd3x3, METH_VARARGS,
     "winograd3x3(x, n, c, h, w, u, cout, m, pad_top, pad_left, oh, ow, bias, base, relu, y, work[, packed])"},
    {"conv_gemm", conv_gemm, METH_VARARGS,
     "conv_gemm(x, n, c, h, w, wmat, cout, kh, kw, sh, sw, dh, dw, pad_top, pad_left, oh, ow, bias, base, relu, y, "
     "work[, packed])"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "atc_py's compiled conv kernels.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
