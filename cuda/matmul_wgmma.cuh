// The wgmma GEMM of Hopper (sm_90a), shared by the modules that instantiate it: matmul_wgmma_half.cu
// (float16 / bfloat16, every layout of A and B) and matmul_wgmma_kmajor.cu (TF32, int8 and FP8, which
// wgmma reads K-major alone). Two modules, so the two halves of its instantiations compile side by side.
#pragma once
//
// Matrix multiply on Hopper's warpgroup tensor-core instructions (sm_90a only), float32 accumulation:
// C (M x N) = A (M x K) @ B (K x N), row-major, row stride ldc in elements.
//  * float16 / bfloat16 inputs: C in the input dtype (rounded to nearest even) or in float32 (the
//    _f32out entries); B row-major or stored transposed (the *bt entries); A row-major or stored
//    transposed (the *at entries: C = X.T @ B, X row-major K x M, read in place);
//  * float32 inputs at TF32 (the *bt_tf32 entries, precision "tf32"): C in float32, B stored transposed
//    only (wgmma reads TF32 operands from shared memory K-major alone: it has no transpose for them);
//    the *atbt_tf32 entries (tiles of at most 128 columns) also take A stored transposed, M-major, which
//    each thread reads from the stage into registers, wgmma's other source of A. The copy engine
//    rounds each float32 to TF32 on its way into shared memory (the tensor maps' element type is
//    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, which rounds to nearest, ties to even; the driver's header does
//    not say so, tests/test_matmul_tf32_wgmma.py checks it on the GPU); a wgmma reading raw float32 bits
//    would drop the 13 low bits instead (truncation). So an operand carries a relative error below
//    u = 2^-11 and a product below 2u + u^2, as on the mma.sync kernels (cuda/matmul_tc.cu, which round
//    the operands themselves); truncation would double u to 2^-10 and bias every product towards zero.
//    Outputs the tensor cores leave infinite or NaN are recomputed in plain FP32 (exact_dot, as in
//    matmul_tc.cu), so infinities, NaNs and values that round up to infinity in TF32 give what an FP32
//    product gives;
//  * int8 inputs: both operands K-major, int32 accumulators (their own register array: wgmma's s32
//    forms), exact while K <= 131071, one split. C is the int32 sums, no epilogue (the *bt_s8 entries,
//    gm.matmul of int8 matrices), or (the *bt_s8_residues entries, the Ozaki scheme's residue products,
//    src/gpumat/matmul/ozaki.py) the sums' symmetric residues modulo the Ozaki modulus of the product's
//    place in the batch (int8: a quarter of the sums' bytes for the reconstruction to read); or (the
//    *bt_s8_<float>out entries) the sums as float32, through the epilogue into a float C;
//  * FP8 inputs (e4m3fn or e5m2, A and B the same format): both operands K-major, float32 accumulators,
//    C in bfloat16, float16 or float32 with the epilogue (the *bt_e4m3_* and *bt_e5m2_* entries).
//
// A and B arrive as TMA tensor maps (built on the host by cuTensorMapEncodeTiled, see
// src/gpumat/matmul/launcher.py), both with the 128-byte swizzle; a box is one 128-byte row wide: 64
// 16-bit elements or 32 float32 (BK_BYTES / sizeof(T), the k tile BK). A as a K (inner) x M tensor with
// BK x 128 boxes; B row-major as an N (inner) x K tensor with 64 x 64 boxes; the *bt entries take B
// stored transposed (x @ W.T: W row-major N x K) as a K (inner) x N tensor with BK x BN boxes (BN: the
// tile's width), read K-major as A is; the *at entries take A stored transposed (X.T @ B: X row-major
// K x M) as an M (inner) x K tensor with 64 x 64 boxes, read M-major as a row-major B is. TMA needs the
// base address and the row stride 16-byte aligned (the host copies other views first). The copy engine
// zero-fills whatever lies past M, N or K, so edge tiles need no special code on the way in. C leaves
// one of three ways, as c_store says: 1, through a third map when its address, stride and row length
// allow (an N x M x splits tensor, 64-row boxes 128 bytes wide, clipped at the edges by the copy engine,
// which writes whole 16-byte pieces: rows must be a multiple of 16 bytes long); 0, by guarded stores
// from the registers; 2 (16-bit inputs; TF32 on tiles of at most 64 columns and the atbt ones), by guarded stores into C
// stored transposed: C[i, j] at C + j * ldc + i (the swapped product of few rows, C^T = op(B)^T @ op(A)^T
// with C's long side on the tile's M, written straight into the caller's row-major C; the old C, for
// beta, read the same way).
//
// Split-K contract (as the other matmul kernels): work item z multiplies over k in
// [z*k_chunk, min(K, (z+1)*k_chunk)) and writes its whole M x N result to C + z*M*ldc; k_chunk must be a
// multiple of BK (64 halves, 32 floats) when there is more than one split (a k tile never straddles two
// splits: the copy engine reads whole boxes).
//
// Batches: `batch` products in one launch (a batch has one split), work items over the batch's tiles.
// The maps of A and B are 3-D, the matrix their outer dimension (a map of one matrix when every product
// shares it: `batched` bit 0 for A, bit 1 for B says which hold a matrix a product); C's layers, a
// split's partials or the batch's matrices, lie c_layer elements apart, as C's map says too.
//
// Epilogue (gpumat::Epilogue, the last parameters): C[i, j] = act(alpha * acc + beta * C[i, j] + bias)
// in float32, applied to the accumulators before they are rounded to C's dtype (either way out); beta
// reads the old C[i, j] through C and ldc, before the tile's TMA store is issued. The host passes the
// identity with split-K (the reduction applies the caller's epilogue), so C + z*M*ldc is C itself
// whenever the epilogue reads C.
//
// Technique (one template, gemm<BM, BN, T, ...>, for the tiles 128 x 256, 128 x 128, 128 x 64, 64 x 64,
// 64 x 32 and 64 x 16 and every input type; Tile<BM, BN> holds what follows from the tile; the byte layout is the same for
// 16-bit and TF32 inputs):
//  * a block computes BM x BN tiles of C with 1 + BM / 64 warpgroups: warpgroup 0 is the producer (one
//    thread issues the bulk tensor copies; beside two consumers the warpgroup gives registers back with
//    setmaxnreg), each other warpgroup a consumer owning 64 rows x BN columns of the tile as BN / 2
//    float32 accumulators a thread (a wgmma m64n<BN>k16, or m64n<BN>k8 for TF32, a k step of 32 bytes, A
//    and B both read from shared memory);
//  * k tiles of 128 bytes of K (BK elements) pass through a ring of shared-memory stages (A BM rows or
//    BM / 64 boxes of 64 columns, B BN rows or BN / 64 boxes of 64 columns, 128 bytes each: the same bytes
//    either way), as many as fit in the 227 KiB a block gets: 4 of 48 KiB for 128 x 256, 6 of 32 KiB for
//    128 x 128, 8 of 24 KiB for 128 x 64, 13 of 16 KiB for 64 x 64 (whose one block an SM then keeps as
//    many bytes of A in flight as 128 x 64's). Each has a "full" mbarrier (the copies' byte count lands)
//    and an "empty" mbarrier (every consumer is done with it). Consumers keep one k tile of wgmma in
//    flight (wait_group 1) and release a stage as soon as the group that read it completes;
//  * A is K-major (K contiguous, 128-byte rows, 8-row swizzle atoms 1024 bytes apart); B is MN-major
//    (N contiguous): its descriptor names the next 64-column box (8192 bytes) as the leading offset and
//    the next 8 k rows (1024 bytes) as the stride offset, and the wgmma transposes it (imm-trans-b); a
//    K-major B (bt) is BN rows of 128 bytes, described as A is. The descriptors do not depend on BN (the
//    instruction's N says how many boxes or rows it reads) nor on T (a k step is 32 bytes either way);
//  * an A stored transposed (at) is M-major, laid out and described as a row-major B is: the stage's
//    A is two boxes of 64 columns of M x 64 k rows (8 KiB each, consumer c's rows in box c, where a
//    K-major A keeps them too), and the wgmma transposes it (imm-trans-a); a warpgroup's 64 rows are
//    one box wide, so its descriptor's leading offset is never read. TF32 (atbt): boxes of 32 floats of
//    M x 32 k rows (4 KiB, two a consumer), read into registers in a bank-conflict-free order, two
//    register buffers in turn so that no k tile's loads overwrite the elements a running group reads;
//  * launched as a programmatic dependent of the kernel before it (sm_90, gpumat.cuh's
//    wait_for_previous_grid): a block inits its barriers and prefetches its maps while the grid before
//    is flushed, and waits for it before its first copy;
//  * persistent blocks: gridDim.x blocks walk the work items (tile, split) in order, so the producer
//    fills the ring for the next tile while the consumers store the last one. Tiles are numbered in
//    groups of 16 row tiles (neighbours in time share A and B panels in L2);
//  * pairs (16-bit, 128 x 128 and 128 x 256, launched as clusters of two blocks: the pair rows): the two
//    blocks of a cluster take row tiles 2 i and 2 i + 1 of one column tile, each copying its own A and half
//    of their shared B into both blocks' stages (multicast), a stage refilled once both blocks' consumers
//    are done with it (they arrive on both blocks' empty barriers). B crosses from L2 once for two tiles:
//    where A's or B's rows are an odd multiple of 16 bytes long, each 128-byte box row touches five 32-byte
//    sectors instead of four and the single blocks wait on L2 (H200: 24 x 1000^3 bfloat16 119.7 -> 90.0 us);
//  * epilogue with c_store 1: each consumer writes its 64 x BN result, 128 bytes of columns at a time,
//    into its two 8 KiB shared-memory buffers in turn, box after box across its tiles (in the 128-byte
//    swizzle, so the fragment stores are free of bank conflicts) and one thread hands the buffer to a
//    TMA store; the consumer goes on
//    to the next tile while the copy engine writes C, and waits only before refilling a buffer whose
//    store has not yet read it. With c_store 0 (C's rows not on 16 bytes, or its width not a multiple of
//    16 bytes: no map): pairs of adjacent columns (2, 4 or 8 bytes) straight from the accumulators where
//    aligned, else element by element, except a 16-bit C whose rows are off 4 bytes (an odd width) and
//    at least a tile wide, on the tiles of 128 columns or more: its boxes of 64 columns are staged by each
//    warp in a shared-memory slice of its own (its 16 rows) and written a row at a time, lane after lane
//    along it, 64 consecutive bytes a store instruction, where the fragment layout's element stores cover
//    2 bytes of each of 8 rows a lane pair (H200, one machine, A/B: 12289 x 1201 x 67 float16 93.7 ->
//    51.1 us, 1000 x 3001 x 777 bfloat16 39.0 -> 26.4). Staging measured slower on the 64-column tiles,
//    where pairs are aligned, and on a C narrower than a tile (attention scores of 77 tokens: 0.96x); a
//    float32 C's pairs fill a sector of a row as they are; with c_store 2 (C transposed, at most a
//    few hundred KiB where the planner asks for it) element by element, a warp's stores of one
//    accumulator covering 8 consecutive addresses in each of 8 rows of C;
//  * the epilogue: scales_only() is tested once and picks one of two copies of the kernel body, the plain
//    one (its accumulators times alpha: 1, or an FP8 product's scales) or one whose consumers first finish
//    the accumulators in place (elements past M or N are left as they are), C then leaving either way (one body with a branch at the store made the
//    plain path up to 7% slower on the H100). The finishing body switches on the activation at each
//    tile; the TF32 entries instead pick one of four finishing bodies, one an activation, at the start
//    (with the recomputation below, one body holding all four made ptxas spill the work loop's state);
//  * TF32's non-finite outputs: after a tile's last k step each consumer tests its accumulators (x * 0
//    is NaN exactly when x is infinite or NaN: one FMA an accumulator) and its warpgroup agrees with one
//    barrier reduction; only then (rare) are the accumulators staged, 32 a thread at a time, through the
//    consumer's C buffers, and each non-finite one inside C recomputed by exact_dot in a rolled loop, so
//    the fix costs the common tile one FMA an accumulator and a barrier, and little code.
// Deterministic: a fixed order of products and sums, no atomics.
#include <stdint.h>

#include <type_traits>

#include "gpumat.cuh"

using gpumat::Dtype;
using gpumat::pack_pair;
using gpumat::store_pair;

namespace {

// The Ozaki scheme's moduli (gpumat.cuh): the *_s8_residues entries reduce product l's sums modulo the l-th
__constant__ int S8_MODULI[gpumat::OZAKI_MAX_MODULI] = {GPUMAT_OZAKI_MODULI};

constexpr int BK_BYTES = 128;                     // a k tile: one 128-byte swizzle row of K (BK elements)
constexpr int KSTEP_BYTES = 32;                   // one wgmma k step: k16 of 16-bit inputs, k8 of TF32
constexpr int MN_BOX_BYTES = 64 * BK_BYTES;       // 8 KiB: an MN-major box (16-bit), 64 k rows x 64 columns
constexpr int C_BUF_BYTES = 64 * 128;            // 64 rows x 128 bytes of C: one TMA store
constexpr int MAX_STAGES = 24;                    // the ring's mbarriers: full[s] and empty[s], 8 bytes each
constexpr int SMEM_LIMIT = 227 * 1024;            // the most dynamic shared memory a block gets on sm_90
constexpr int GROUP_M = 16;

// Everything that follows the tile (BM = 128 or 64 rows, BN = 256, 128, 64, 32 or 16 columns of C): BM / 64
// consumer warpgroups beside the producer, each thread of one holding BN / 2 float32 accumulators (its
// warpgroup's 64 rows x BN columns over 128 threads); a stage is A's BM rows of 128 bytes of K and B's BN
// (BN / 64 boxes of 64 columns, or one BN-row box K-major); the ring has as many stages as fit beside
// the C buffers (two a consumer), the alignment slack and the barriers (BAR_BYTES: full[s] at + 8 s,
// empty[s] at + BAR_BYTES / 2 + 8 s), at most 8 stages for the 128-row tiles and 24 for the 64-row ones,
// whose stages hold half the bytes of A: a block alone on an SM (a layer on few tokens has fewer tiles
// than SMs) keeps as many of the weight's bytes in flight as the 128 x 64 tile's 8 stages, and the
// narrow widths (16 or 32 columns: a few tokens' rows of a swapped product) more, their stages being
// mostly the weight. In bytes the same for every input type (BK = 64 halves or 32 floats of K a stage).
template <int BM_, int BN_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_;
    static constexpr int CONSUMERS = BM / 64;
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    static constexpr int ACC = BN / 2;
    static constexpr int A_BYTES = BM * BK_BYTES;
    static constexpr int B_BYTES = BK_BYTES * BN;
    static constexpr int C_BYTES = CONSUMERS * 2 * C_BUF_BYTES;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int STAGES_CAP = BM == 64 ? MAX_STAGES : 8;
    static constexpr int STAGES_FIT = (SMEM_LIMIT - C_BYTES - 1024 - 16 * MAX_STAGES) / STAGE_BYTES;
    static constexpr int STAGES = STAGES_FIT < STAGES_CAP ? STAGES_FIT : STAGES_CAP;
    static constexpr int BAR_BYTES = (16 * STAGES + 127) / 128 * 128;
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + C_BYTES + 1024 + BAR_BYTES;  // + alignment slack
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups");
    static_assert(BN == 16 || BN == 32 || BN == 64 || BN == 128 || BN == 256, "wgmma m64n<BN>k16");
    static_assert(BN >= 64 || BM == 64, "the narrow widths: one consumer");
    static_assert(STAGES >= 2 && SMEM_BYTES <= SMEM_LIMIT, "ring");
};
// variants.py (WGMMA_SMEM) asks for these; tests/test_matmul_tc_half.py reads them here
static_assert(Tile<128, 256>::STAGES == 4 && Tile<128, 256>::SMEM_BYTES == 230528, "48 KiB stages: 4 fit");
static_assert(Tile<128, 128>::STAGES == 6 && Tile<128, 128>::SMEM_BYTES == 230528, "32 KiB stages: 6 fit");
static_assert(Tile<128, 64>::STAGES == 8 && Tile<128, 64>::SMEM_BYTES == 230528, "24 KiB stages: 8 fit");
static_assert(Tile<64, 64>::STAGES == 13 && Tile<64, 64>::SMEM_BYTES == 230656, "16 KiB stages: 13 fit");
static_assert(Tile<64, 32>::STAGES == 17 && Tile<64, 32>::SMEM_BYTES == 226688, "12 KiB stages: 17 fit");
static_assert(Tile<64, 16>::STAGES == 20 && Tile<64, 16>::SMEM_BYTES == 222592, "10 KiB stages: 20 fit");

// A launch's products: `count` of them (1: one product), the layers of C (a split's partials, or the
// matrices of a batch) c_layer elements apart, and whether the maps of A and B hold a matrix a product
// (their outer dimension, the layer a work item reads) or one matrix that every product shares.
struct Batch {
    int count;
    long long c_layer;
    bool a_batched, b_batched;
    __device__ Batch(int count_, long long c_layer_, int batched)
        : count(count_), c_layer(c_layer_), a_batched(batched & 1), b_batched(batched & 2)
    {
    }
};

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPUMAT_HAS_WGMMA 1

using gpumat::smem_addr;

__device__ __forceinline__ void bar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}

__device__ __forceinline__ void bar_wait(uint32_t bar, int parity)
{
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" :: "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

__device__ __forceinline__ void bar_expect(uint32_t bar, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}

// A box of the (3-D) tensor map at element coordinates (inner, outer) of matrix `layer` into shared
// memory; its bytes count towards `bar`'s transaction.
__device__ __forceinline__ void tma_load(uint32_t dst, const TensorMap* map, int inner, int outer, int layer,
                                         uint32_t bar)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(layer), "r"(bar) : "memory");
}

// The same box into shared memory at `dst` of each block of the cluster in `mask` (bit r: the block of
// rank r), each block's mbarrier at `bar` (the same offsets in every block) counting its bytes.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const TensorMap* map, int inner, int outer, int layer,
                                                   uint32_t bar, uint16_t mask)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
        :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(layer), "r"(bar), "h"(mask)
        : "memory");
}

// Arrive on the mbarrier at `bar` (an offset of this block's shared memory) of the cluster's block `rank`.
// The default release (.cta): what the arrival orders is the wgmma's reads of a stage, finished before it
// (wgmma.wait_group); a release at cluster scope fences this thread's memory operations at every arrival,
// and the consumer's warp (its warpgroup's next wgmma) waited for it: the pairs ran at half speed.
__device__ __forceinline__ void bar_arrive_remote(uint32_t bar, uint32_t rank)
{
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" :: "r"(bar), "r"(rank) : "memory");
}

// Every thread of every block of the cluster: what each did to shared memory before is visible after.
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// Fetch a tensor map into the TMA unit's descriptor cache before its first use: the first load of a
// small product otherwise waits for the descriptor as well as for the data.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// C's box at element coordinates (column, row, layer) from shared memory, in this thread's bulk group.
__device__ __forceinline__ void tma_store(const TensorMap* map, uint32_t src, int col, int row, int layer)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(layer), "r"(src) : "memory");
}

__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// this thread's bulk stores but the newest N have finished reading shared memory
template <int N>
__device__ __forceinline__ void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }

__device__ __forceinline__ void store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// the 128 threads of one consumer warpgroup (named barrier `id`)
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory"); }

// Two adjacent C values into shared memory, in C's type.
template <class Out>
__device__ __forceinline__ void st_shared_pair(uint32_t addr, float x, float y)
{
    if constexpr (sizeof(Out) == 4) {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(addr), "f"(x), "f"(y) : "memory");
    } else {
        asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(pack_pair<Out>(x, y)) : "memory");
    }
}

// Two adjacent integer C values of the INT8 body into shared memory: int32 sums, or their residues in int8.
template <class Out>
__device__ __forceinline__ void st_shared_pair(uint32_t addr, int x, int y)
{
    static_assert(sizeof(Out) == 1 || sizeof(Out) == 4, "the INT8 body's C: int32 sums or int8 residues");
    if constexpr (sizeof(Out) == 4) {
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" :: "r"(addr), "r"(x), "r"(y) : "memory");
    } else {
        const unsigned short pair = (unsigned short)((x & 0xff) | ((y & 0xff) << 8));
        asm volatile("st.shared.b16 [%0], %1;\n" :: "r"(addr), "h"(pair) : "memory");
    }
}

// One 16-bit element of C back from a staged row in shared memory (its bits as they were stored).
template <class Out>
__device__ __forceinline__ Out ld_shared_element(uint32_t addr)
{
    static_assert(sizeof(Out) == 2, "a staged C row holds 16-bit elements");
    unsigned short bits;
    asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(bits) : "r"(addr) : "memory");
    Out x;
    memcpy(&x, &bits, 2);
    return x;
}

// An accumulator as C's element: an int32 sum as it is, a float32 one through Dtype (to nearest even).
template <class Out, class Acc>
__device__ __forceinline__ Out c_value(Acc x)
{
    if constexpr (std::is_same_v<Out, int>)
        return x;
    else
        return Dtype<Out>::from(x);
}

// Two adjacent C values by plain stores (the second where pair_ok), as one store where vec says it is aligned.
template <class Out, class Acc>
__device__ __forceinline__ void store_c_pair(Out* p, Acc x, Acc y, bool pair_ok, bool vec)
{
    if constexpr (std::is_same_v<Out, int>) {
        if (pair_ok && vec) {
            *reinterpret_cast<int2*>(p) = make_int2(x, y);
        } else {
            p[0] = x;
            if (pair_ok) p[1] = y;
        }
    } else {
        store_pair<Out>(p, x, y, pair_ok, vec);
    }
}

// Shared-memory matrix descriptor: start address, leading and stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lead, uint32_t stride)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lead >> 4) << 16) | ((uint64_t)(stride >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// d (64 x N, float32; N = 16-256, N / 2 accumulators a thread) += A (64 x 16 from shared memory:
// K-major (imm-trans-a 0), or with A_MMAJOR M-major, transposed by the instruction (1)) * B (16 x N from
// shared memory: N-major, transposed by the instruction (imm-trans-b 1), or with B_KMAJOR K-major like
// a K-major A (0)). The accumulators are the first N / 2 operands, then the two descriptors, the scales
// (d, A, B: all 1), then the two transpose flags as immediates. The transposes exist for 16-bit inputs
// alone.
#define GPUMAT_ACC_0_63                                                                                    \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                       \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                       \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GPUMAT_ACC_64_127                                                                                  \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                       \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                       \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "           \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define GPUMAT_ACC_0_31                                                                                    \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"

#define GPUMAT_ACC_0_7 "%0, %1, %2, %3, %4, %5, %6, %7"
#define GPUMAT_ACC_0_15 GPUMAT_ACC_0_7 ", %8, %9, %10, %11, %12, %13, %14, %15"

#define GPUMAT_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                     "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define GPUMAT_D16 GPUMAT_D8(0), GPUMAT_D8(8)
#define GPUMAT_D32 GPUMAT_D8(0), GPUMAT_D8(8), GPUMAT_D8(16), GPUMAT_D8(24)
#define GPUMAT_D64 GPUMAT_D8(0), GPUMAT_D8(8), GPUMAT_D8(16), GPUMAT_D8(24), GPUMAT_D8(32), GPUMAT_D8(40), \
                   GPUMAT_D8(48), GPUMAT_D8(56)
#define GPUMAT_D128 GPUMAT_D64, GPUMAT_D8(64), GPUMAT_D8(72), GPUMAT_D8(80), GPUMAT_D8(88), GPUMAT_D8(96), \
                    GPUMAT_D8(104), GPUMAT_D8(112), GPUMAT_D8(120)

template <class T>
struct Wgmma;

// One specialisation per input type (its PTX type names, TYPES); run<A_MMAJOR, B_KMAJOR>(d, a, b) picks
// the shape from d's length.
#define GPUMAT_WGMMA_FOR(T, TYPES)                                                                           \
    template <>                                                                                              \
    struct Wgmma<T> {                                                                                        \
        template <bool A_MMAJOR, bool B_KMAJOR, int ACC>                                                     \
        __device__ __forceinline__ static void run(float (&d)[ACC], uint64_t a, uint64_t b)                  \
        {                                                                                                    \
            static_assert(ACC == 128 || ACC == 64 || ACC == 32 || ACC == 16 || ACC == 8,                     \
                          "m64n256k16, m64n128k16, m64n64k16, m64n32k16 or m64n16k16");                      \
            if constexpr (ACC == 128)                                                                        \
                asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " "                        \
                             "{" GPUMAT_ACC_0_63 ", " GPUMAT_ACC_64_127 "}, %128, %129, 1, 1, 1, %130, %131;\n" \
                             : GPUMAT_D128                                                                   \
                             : "l"(a), "l"(b), "n"(A_MMAJOR ? 1 : 0), "n"(B_KMAJOR ? 0 : 1));               \
            else if constexpr (ACC == 64)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPES " "                        \
                             "{" GPUMAT_ACC_0_63 "}, %64, %65, 1, 1, 1, %66, %67;\n"                         \
                             : GPUMAT_D64                                                                    \
                             : "l"(a), "l"(b), "n"(A_MMAJOR ? 1 : 0), "n"(B_KMAJOR ? 0 : 1));               \
            else if constexpr (ACC == 32)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_31 "}, %32, %33, 1, 1, 1, %34, %35;\n"                         \
                             : GPUMAT_D32                                                                    \
                             : "l"(a), "l"(b), "n"(A_MMAJOR ? 1 : 0), "n"(B_KMAJOR ? 0 : 1));               \
            else if constexpr (ACC == 16)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_15 "}, %16, %17, 1, 1, 1, %18, %19;\n"                         \
                             : GPUMAT_D16                                                                    \
                             : "l"(a), "l"(b), "n"(A_MMAJOR ? 1 : 0), "n"(B_KMAJOR ? 0 : 1));               \
            else                                                                                             \
                asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_7 "}, %8, %9, 1, 1, 1, %10, %11;\n"                            \
                             : GPUMAT_D8(0)                                                                  \
                             : "l"(a), "l"(b), "n"(A_MMAJOR ? 1 : 0), "n"(B_KMAJOR ? 0 : 1));               \
        }                                                                                                    \
    };

GPUMAT_WGMMA_FOR(__half, "f16.f16")
GPUMAT_WGMMA_FOR(__nv_bfloat16, "bf16.bf16")

// TF32 (float32 in shared memory, read as TF32: the tensor cores take the top 19 bits of each element):
// d (64 x N) += A (64 x 8, K-major) * B (8 x N, K-major), k8 a step (32 bytes, as k16 of halves). The
// .tf32 forms have no transpose immediates: both operands must be K-major.
template <>
struct Wgmma<float> {
    template <bool A_MMAJOR, bool B_KMAJOR, int ACC>
    __device__ __forceinline__ static void run(float (&d)[ACC], uint64_t a, uint64_t b)
    {
        static_assert(!A_MMAJOR && B_KMAJOR, "wgmma reads TF32 operands K-major only");
        static_assert(ACC == 128 || ACC == 64 || ACC == 32 || ACC == 16 || ACC == 8, "m64n<2 ACC>k8");
        if constexpr (ACC == 128)
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_63 ", " GPUMAT_ACC_64_127 "}, %128, %129, 1, 1, 1;\n"
                         : GPUMAT_D128 : "l"(a), "l"(b));
        else if constexpr (ACC == 64)
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_63 "}, %64, %65, 1, 1, 1;\n"
                         : GPUMAT_D64 : "l"(a), "l"(b));
        else if constexpr (ACC == 32)
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_31 "}, %32, %33, 1, 1, 1;\n"
                         : GPUMAT_D32 : "l"(a), "l"(b));
        else if constexpr (ACC == 16)
            asm volatile("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_15 "}, %16, %17, 1, 1, 1;\n"
                         : GPUMAT_D16 : "l"(a), "l"(b));
        else
            asm volatile("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_7 "}, %8, %9, 1, 1, 1;\n"
                         : GPUMAT_D8(0) : "l"(a), "l"(b));
    }

    // The same with A (64 x 8) from registers instead of shared memory: the form that reads an A stored
    // M-major (which the shared-memory forms cannot), each thread of the warpgroup handing over four
    // elements: a[h + 2 e] = A[16 warp + lane / 4 + 8 h, lane % 4 + 4 e] (TF32 bits: the copy engine has
    // rounded them on their way into shared memory).
    template <int ACC>
    __device__ __forceinline__ static void run_regs(float (&d)[ACC], const uint32_t (&a)[4], uint64_t b)
    {
        static_assert(ACC == 64 || ACC == 32 || ACC == 16 || ACC == 8, "m64n<2 ACC>k8, tiles of at most 128 columns");
        if constexpr (ACC == 64)
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_63 "}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                         : GPUMAT_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        else if constexpr (ACC == 32)
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_31 "}, {%32, %33, %34, %35}, %36, 1, 1, 1;\n"
                         : GPUMAT_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        else if constexpr (ACC == 16)
            asm volatile("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_15 "}, {%16, %17, %18, %19}, %20, 1, 1, 1;\n"
                         : GPUMAT_D16 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        else
            asm volatile("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
                         "{" GPUMAT_ACC_0_7 "}, {%8, %9, %10, %11}, %12, 1, 1, 1;\n"
                         : GPUMAT_D8(0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    }
};

#define GPUMAT_R8(i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), \
                     "+r"(d[i + 4]), "+r"(d[i + 5]), "+r"(d[i + 6]), "+r"(d[i + 7])
#define GPUMAT_R16 GPUMAT_R8(0), GPUMAT_R8(8)
#define GPUMAT_R32 GPUMAT_R16, GPUMAT_R8(16), GPUMAT_R8(24)
#define GPUMAT_R64 GPUMAT_R32, GPUMAT_R8(32), GPUMAT_R8(40), GPUMAT_R8(48), GPUMAT_R8(56)
#define GPUMAT_R128 GPUMAT_R64, GPUMAT_R8(64), GPUMAT_R8(72), GPUMAT_R8(80), GPUMAT_R8(88), GPUMAT_R8(96), \
                    GPUMAT_R8(104), GPUMAT_R8(112), GPUMAT_R8(120)

// INT8 (signed bytes, exact products, int32 accumulators): d (64 x N) += A (64 x 32, K-major) * B (32 x N,
// K-major), k32 a step (32 bytes, as k16 of halves and k8 of TF32). The integer forms take neither scales
// nor transposes: both operands K-major, as TF32's.
template <>
struct Wgmma<int8_t> {
    template <bool A_MMAJOR, bool B_KMAJOR, int ACC>
    __device__ __forceinline__ static void run(int (&d)[ACC], uint64_t a, uint64_t b)
    {
        static_assert(!A_MMAJOR && B_KMAJOR, "wgmma reads 8-bit integer operands K-major only");
        static_assert(ACC == 128 || ACC == 64 || ACC == 32 || ACC == 16 || ACC == 8, "m64n<2 ACC>k32");
        if constexpr (ACC == 128)
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
                         "{" GPUMAT_ACC_0_63 ", " GPUMAT_ACC_64_127 "}, %128, %129, 1;\n"
                         : GPUMAT_R128 : "l"(a), "l"(b));
        else if constexpr (ACC == 64)
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                         "{" GPUMAT_ACC_0_63 "}, %64, %65, 1;\n"
                         : GPUMAT_R64 : "l"(a), "l"(b));
        else if constexpr (ACC == 32)
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
                         "{" GPUMAT_ACC_0_31 "}, %32, %33, 1;\n"
                         : GPUMAT_R32 : "l"(a), "l"(b));
        else if constexpr (ACC == 16)
            asm volatile("wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
                         "{" GPUMAT_ACC_0_15 "}, %16, %17, 1;\n"
                         : GPUMAT_R16 : "l"(a), "l"(b));
        else
            asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 "
                         "{" GPUMAT_ACC_0_7 "}, %8, %9, 1;\n"
                         : GPUMAT_R8(0) : "l"(a), "l"(b));
    }
};

// FP8 (e4m3fn or e5m2 bytes, float32 accumulators): d (64 x N) += A (64 x 32, K-major) * B (32 x N, K-major),
// k32 a step (32 bytes, as the other types' steps). Like TF32 and int8, the FP8 forms have no transpose
// immediates: both operands K-major. TYPES: both operands' PTX type (one FP8 format for A and B).
#define GPUMAT_WGMMA_FP8_FOR(T, TYPES)                                                                       \
    template <>                                                                                              \
    struct Wgmma<T> {                                                                                        \
        template <bool A_MMAJOR, bool B_KMAJOR, int ACC>                                                     \
        __device__ __forceinline__ static void run(float (&d)[ACC], uint64_t a, uint64_t b)                  \
        {                                                                                                    \
            static_assert(!A_MMAJOR && B_KMAJOR, "wgmma reads FP8 operands K-major only");                   \
            static_assert(ACC == 128 || ACC == 64 || ACC == 32 || ACC == 16 || ACC == 8, "m64n<2 ACC>k32");  \
            if constexpr (ACC == 128)                                                                        \
                asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.f32." TYPES " "                        \
                             "{" GPUMAT_ACC_0_63 ", " GPUMAT_ACC_64_127 "}, %128, %129, 1, 1, 1;\n"          \
                             : GPUMAT_D128 : "l"(a), "l"(b));                                                \
            else if constexpr (ACC == 64)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32." TYPES " "                        \
                             "{" GPUMAT_ACC_0_63 "}, %64, %65, 1, 1, 1;\n" : GPUMAT_D64 : "l"(a), "l"(b));   \
            else if constexpr (ACC == 32)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_31 "}, %32, %33, 1, 1, 1;\n" : GPUMAT_D32 : "l"(a), "l"(b));   \
            else if constexpr (ACC == 16)                                                                    \
                asm volatile("wgmma.mma_async.sync.aligned.m64n32k32.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_15 "}, %16, %17, 1, 1, 1;\n" : GPUMAT_D16 : "l"(a), "l"(b));   \
            else                                                                                             \
                asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.f32." TYPES " "                         \
                             "{" GPUMAT_ACC_0_7 "}, %8, %9, 1, 1, 1;\n" : GPUMAT_D8(0) : "l"(a), "l"(b));    \
        }                                                                                                    \
    };

GPUMAT_WGMMA_FP8_FOR(__nv_fp8_e4m3, "e4m3.e4m3")
GPUMAT_WGMMA_FP8_FOR(__nv_fp8_e5m2, "e5m2.e5m2")

// Whether the epilogue at most scales (no beta C, no bias, no activation): the plain body runs it, multiplying
// its float32 accumulators by alpha as the finishing body's first step would (the same bits). An FP8 product's
// per-tensor scales are such an alpha; in the finishing body its 4096^3 products took 20% longer on the H200.
__device__ __forceinline__ bool scales_only(const gpumat::Epilogue& ep)
{
    return ep.beta == 0.0 && ep.bias_along == 0 && ep.activation == 0;
}

// Whether `x` holds for any of the 128 threads of a consumer warpgroup (named barrier `id`, a
// reduction: every thread gets the answer).
__device__ __forceinline__ bool warpgroup_any(int id, bool x)
{
    uint32_t any;
    asm volatile(
        "{\n"
        ".reg .pred p, q;\n"
        "setp.ne.u32 p, %1, 0;\n"
        "bar.red.or.pred q, %2, 128, p;\n"
        "selp.u32 %0, 1, 0, q;\n"
        "}\n"
        : "=r"(any) : "r"((uint32_t)x), "r"(id) : "memory");
    return any != 0;
}

// Whether any accumulator is infinite or NaN: x * 0 is NaN exactly then (0 or -0 otherwise, which
// leaves a sum of zeros zero), so four chains of FMAs with 0 end in NaN exactly then. No branch, one
// FMA an accumulator; IEEE semantics keep the compiler from dropping the multiplications by zero.
template <int ACC>
__device__ __forceinline__ bool any_nonfinite(const float (&d)[ACC])
{
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < ACC; ++i) s[i % 4] = __fmaf_rn(d[i], 0.0f, s[i % 4]);
    return isnan((s[0] + s[1]) + (s[2] + s[3]));
}

// One element of C in plain FP32 (fused multiply-adds in k order, as exact_dot in matmul_tc.cu): row
// `a` of A (its k-th element at a[k * a_step]: 1 for a K-major A, its row stride for one stored
// transposed) times row `w` of W (B stored transposed, N rows of K) over [k_begin, k_end).
__device__ __forceinline__ float exact_dot(const float* a, long long a_step, const float* w, int k_begin, int k_end)
{
    float sum = 0.0f;
#pragma unroll 1
    for (int k = k_begin; k < k_end; ++k) sum = fmaf(a[k * a_step], w[k], sum);
    return sum;
}

// The TF32 tile's outputs that came out of the tensor cores infinite or NaN, recomputed by exact_dot
// (warpgroup-uniform: every thread of the consumer calls it, or none). d[4 j + 2 h + e] is
// C[row + 8 h, col + 8 j + e]; elements past M or N are left as they are. The consumer's two C buffers
// (16 KiB at `bufs`) hold 32 accumulators of each of its 128 threads at a time (thread lt's at
// bufs + 128 lt, its own: no barrier between the threads' passes; a narrow tile's 8 or 16 in one part),
// so the recomputation runs in a rolled loop: registers cannot be indexed, shared memory can. The buffers are free once the previous
// tile's TMA stores have read them; the tile's own stores begin with a barrier of the warpgroup, after
// every thread's pass here.
template <bool A_MMAJOR, int ACC>
__device__ __forceinline__ void recompute_nonfinite(float (&d)[ACC], uint32_t bufs, int c, int lt, int row, int col,
                                                    int M, int N, const float* A, long long lda, const float* W,
                                                    long long ldw, int k_begin, int k_end)
{
    if (lt == 0) store_wait_read<0>();
    warpgroup_sync(1 + c);
    const uint32_t mine = bufs + 128 * lt;
    constexpr int PART = ACC < 32 ? ACC : 32;  // accumulators a pass
#pragma unroll
    for (int part = 0; part < ACC / PART; ++part) {
#pragma unroll
        for (int i = 0; i < PART; i += 4)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(mine + 4 * i), "f"(d[PART * part + i]),
                         "f"(d[PART * part + i + 1]), "f"(d[PART * part + i + 2]), "f"(d[PART * part + i + 3])
                         : "memory");
#pragma unroll 1
        for (int i = 0; i < PART; ++i) {
            const int x = PART * part + i;  // d[x]: j = x / 4, h = x / 2 % 2, e = x % 2
            const int r = row + 8 * ((x >> 1) & 1), cc = col + 8 * (x >> 2) + (x & 1);
            float v;
            asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(mine + 4 * i) : "memory");
            if (!isfinite(v) && r < M && cc < N) {
                // (A_MMAJOR: A stored as K rows of M, row r of A a column of that storage)
                v = A_MMAJOR ? exact_dot(A + r, lda, W + cc * ldw, k_begin, k_end)
                             : exact_dot(A + r * lda, 1, W + cc * ldw, k_begin, k_end);
                asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(mine + 4 * i), "f"(v) : "memory");
            }
        }
#pragma unroll
        for (int i = 0; i < PART; i += 4)
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                         : "=f"(d[PART * part + i]), "=f"(d[PART * part + i + 1]), "=f"(d[PART * part + i + 2]),
                           "=f"(d[PART * part + i + 3])
                         : "r"(mine + 4 * i) : "memory");
    }
}

// Work item -> (row tile, column tile, layer): layers outermost (layer = matrix of the batch x splits +
// split; a batch has one split), tiles in groups of GROUP_M row tiles (gpumat::grouped_tile).
struct Work {
    int tm, tn, layer;
};

__device__ __forceinline__ Work work_item(int w, int tiles_m, int tiles_n)
{
    const int tiles = tiles_m * tiles_n;
    const int layer = w / tiles;
    const gpumat::TileIndex tile = gpumat::grouped_tile<GROUP_M>(w - layer * tiles, tiles_m, tiles_n);
    return {tile.tm, tile.tn, layer};
}

#endif

// A consumer's accumulators through the epilogue f (an Epilogue::Fixed): d[4 j + 2 h + e] is
// C[row + 8 h, col + 8 j + e]; elements past M or N are left as they are. The old values of C and the
// bias elements are read CHUNK column pairs at a time, all of a chunk's reads before any of its
// arithmetic, and from addresses clamped into C and the bias (an element past M or N reads the last
// row's or column's; its result is dropped): no read depends on a branch, so a chunk's reads are in
// flight together. CHUNK: as many as the registers left beside the accumulators hold without spilling
// (finish_chunk). A guarded read (`in_c ? *c : 0`) made the compiler branch around each one, which
// paid one memory latency an element, 128 a thread in turn: beta = 1 added 46% to a 4096^3 bfloat16
// product on the H100, 21% with the reads in chunks and C asked into L2 early (prefetch_c). The
// arithmetic is the same either way (same bits).
template <class Out, int CHUNK, int ACC, class F>
__device__ __forceinline__ void finish(float (&d)[ACC], const F& f, int row, int col, int M, int N, const Out* Cz,
                                       long long ldc, bool c_trans)
{
    // CHUNK 0: one pair at a time, each read guarded by its element's place in C (the compiler then
    // issues them one after another: the fallback for a body with no registers to spare)
    constexpr bool GUARDED = CHUNK == 0;
    constexpr int PAIRS = ACC / 4, STEP = GUARDED ? 1 : CHUNK;  // column pairs j (columns col + 8 j, + 1)
    static_assert(PAIRS % STEP == 0, "whole chunks");
    const bool row_in[2] = {row < M, row + 8 < M};
    const int rows[2] = {GUARDED ? row : min(row, M - 1), GUARDED ? row + 8 : min(row + 8, M - 1)};
    // C[i, j] at Cz + i * ldc + j, or (c_trans: C stored transposed) at Cz + j * ldc + i
    const long long rs = c_trans ? 1 : ldc, cs = c_trans ? ldc : 1;
    const Out* const crow[2] = {Cz + rows[0] * rs, Cz + rows[1] * rs};
    const long long step = f.bias_step;
    const float row_bias[2] = {GUARDED && !row_in[0] ? 0.0f : f.bias_of(2, rows[0] * step),
                               GUARDED && !row_in[1] ? 0.0f : f.bias_of(2, rows[1] * step)};
#pragma unroll
    for (int j0 = 0; j0 < PAIRS; j0 += STEP) {
        float old[STEP][2][2], col_bias[STEP][2];
        int jc[STEP][2];  // the columns read: clamped into C (GUARDED: as they are, read only inside C)
#pragma unroll
        for (int jj = 0; jj < STEP; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = col + 8 * (j0 + jj) + e;
                jc[jj][e] = GUARDED ? j : min(j, N - 1);
            }
        if (f.reads_c) {
#pragma unroll
            for (int jj = 0; jj < STEP; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const bool in_c = row_in[h] && col + 8 * (j0 + jj) + e < N;
                        old[jj][h][e] = GUARDED && !in_c ? 0.0f : Dtype<Out>::acc(crow[h][jc[jj][e] * cs]);
                    }
        } else {
#pragma unroll
            for (int jj = 0; jj < STEP; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) old[jj][0][e] = old[jj][1][e] = 0.0f;
        }
#pragma unroll
        for (int jj = 0; jj < STEP; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const bool col_in = col + 8 * (j0 + jj) + e < N;
                col_bias[jj][e] = GUARDED && !col_in ? 0.0f : f.bias_of(1, jc[jj][e] * step);
            }
#pragma unroll
        for (int jj = 0; jj < STEP; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const bool col_in = col + 8 * (j0 + jj) + e < N;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float& x = d[4 * (j0 + jj) + 2 * h + e];
                    const float y = f(x, f.bias_along == 1 ? col_bias[jj][e] : row_bias[h], old[jj][h][e]);
                    x = row_in[h] && col_in ? y : x;
                }
            }
    }
}

// Ask L2 for the lines of a consumer's 64 rows x BN columns of C from (row0, col0), a 128-byte line a
// thread at a time, when the tile begins: the epilogue's reads of the old C (beta != 0) then find them
// there after the tile's products instead of waiting on memory. A hint: nothing waits for it.
template <class Out, int BN>
__device__ __forceinline__ void prefetch_c(const Out* Cz, long long ldc, int row0, int col0, int M, int N, int lt)
{
    // a row's lines (a tile narrower than a line: the one line its row starts in)
    constexpr int PER_LINE = 128 / (int)sizeof(Out), LINES = BN >= PER_LINE ? BN / PER_LINE : 1;
#pragma unroll 1
    for (int i = lt; i < 64 * LINES; i += 128) {
        const int r = row0 + i / LINES, cc = col0 + (i % LINES) * PER_LINE;
        if (r < M && cc < N) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(Cz + (long long)r * ldc + cc));
    }
}

// The column pairs finish() reads at once for ACC accumulators a thread and 16-bit or TF32 inputs: the
// most that ptxas fits in the 168 registers a thread beside the accumulators with no spill (nvcc 13.0,
// sm_90a; the TF32 body also holds its recomputation's state).
template <int ACC, bool TF32>
__host__ __device__ constexpr int finish_chunk()
{
    return ACC == 128 ? (TF32 ? 0 : 2) : ACC >= 16 ? 4 : 2;
}

// finish() with the activation the epilogue e names.
template <class Out, int CHUNK, int ACC>
__device__ __forceinline__ void finish_with(float (&d)[ACC], const gpumat::Epilogue& e, int row, int col, int M,
                                            int N, const Out* Cz, long long ldc, bool c_trans)
{
    switch (e.activation) {  // one unrolled loop an activation (see Epilogue::fixed)
    case 1: finish<Out, CHUNK>(d, e.fixed<Out, float, 1>(), row, col, M, N, Cz, ldc, c_trans); break;
    case 2: finish<Out, CHUNK>(d, e.fixed<Out, float, 2>(), row, col, M, N, Cz, ldc, c_trans); break;
    case 3: finish<Out, CHUNK>(d, e.fixed<Out, float, 3>(), row, col, M, N, Cz, ldc, c_trans); break;
    default: finish<Out, CHUNK>(d, e.fixed<Out, float, 0>(), row, col, M, N, Cz, ldc, c_trans); break;
    }
}

// BM, BN: the tile (Tile<BM, BN>). T: the input type (__half, __nv_bfloat16, float read as TF32, int8_t,
// or an FP8 type, __nv_fp8_e4m3 / __nv_fp8_e5m2, K-major and float32 accumulators as the 16-bit types').
// EPI: the accumulators go through the epilogue ep before C is written; else ep is not read. A_MMAJOR
// (16-bit only): map_a describes A's storage as K rows of M (op(A) = the transpose of a K x M row-major
// matrix, as in A.T @ B), loaded as BM / 64 boxes of 64 x 64 a stage, one a consumer, and read M-major
// (the instruction transposes it, as it does a row-major B); else M rows of K, one BK x BM box, read
// K-major. B_KMAJOR: map_b describes B's storage as N rows of K (op(B) = the transpose of an N x K
// row-major matrix, as in x @ W.T), loaded as one BK x BN box a stage and read K-major like a K-major A;
// else K rows of N, loaded as BN / 64 boxes of 64 x 64. batch: the products (see Batch). A / lda / sa and
// B / ldb / sb: the operands' storage (what the maps describe; row and batch strides), read only by
// TF32's recomputation of non-finite outputs (B then N rows of K); the 16-bit entries pass null.
// ACT: with EPI, the activation fixed at compile time (0-3: one copy of the body an activation, the TF32
// entries: their recomputation of non-finite outputs beside four activations' finish() in one body
// made ptxas spill the work loop's state), or -1: switched on at each tile (finish_with).
template <int BM, int BN, class T, class Out, bool EPI, bool A_MMAJOR, bool B_KMAJOR, int ACT = -1>
__device__ __forceinline__ void gemm(const TensorMap& map_a, const TensorMap& map_b, const TensorMap& map_c,
                                     Out* __restrict__ C, int M, int N, int K, long long ldc, int k_chunk, int c_store,
                                     const Batch& batch, const T* A, long long lda, long long sa, const T* B,
                                     long long ldb, long long sb, const gpumat::Epilogue& ep)
{
#ifdef GPUMAT_HAS_WGMMA
    using Cfg = Tile<BM, BN>;
    constexpr int STAGES = Cfg::STAGES, STAGE_BYTES = Cfg::STAGE_BYTES, ACC = Cfg::ACC;
    constexpr int A_BYTES = Cfg::A_BYTES;
    constexpr int BK = BK_BYTES / (int)sizeof(T);  // k tile in elements: 64 halves, 32 floats, 128 bytes
    constexpr bool TF32 = sizeof(T) == 4;
    constexpr bool INT8 = std::is_same_v<T, int8_t>;  // int8 in, int32 accumulators, one split
    constexpr bool RESIDUES = INT8 && sizeof(Out) == 1;  // C the sums' int8 residues
    // C a float type (float32, bfloat16, float16): the int32 sums as floats, through the epilogue
    constexpr bool DEQUANT = INT8 && !RESIDUES && !std::is_same_v<Out, int>;
    // (TF32 reads an M-major A from registers, on the tiles of at most 128 columns: run_regs; 256 spilled)
    static_assert(!TF32 || (B_KMAJOR && sizeof(Out) == 4 && (!A_MMAJOR || BN <= 128)),
                  "TF32: B K-major, C float32, A K-major or (at most 128 columns) M-major");
    static_assert(!INT8 || (!A_MMAJOR && B_KMAJOR && (DEQUANT || !EPI)),
                  "INT8: K-major; C the int32 sums or int8 residues (no epilogue), or floats with one");
    using Acc = std::conditional_t<INT8, int, float>;
    static_assert(BN >= 64 || B_KMAJOR, "B in 64-column boxes: the narrow widths read it K-major (BN rows)");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // the 128-byte swizzle repeats every 1024 bytes: stages start on such a boundary
    const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t c_bufs = base + STAGES * STAGE_BYTES;  // consumer c's buffers at c_bufs + 2 c C_BUF_BYTES
    const uint32_t bars = c_bufs + Cfg::C_BYTES;  // full[s] at bars + 8 s, empty[s] at empty + 8 s
    const uint32_t empty = bars + Cfg::BAR_BYTES / 2;
    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int splits = max(1, (K + k_chunk - 1) / k_chunk);
    // A pair (the 16-bit 128-row tiles of 128 or 256 columns, launched as clusters of two blocks by the
    // pair rows): the two blocks compute the row tiles 2 i and 2 i + 1 of one column tile together, each
    // loading its own A and half of the B they share into both blocks' stages (a multicast copy): B crosses
    // from L2 once for two tiles. A stage is then refilled once the consumers of both blocks are done with
    // it. A work item is a pair's, the block of rank r taking row tile 2 i + r (past the last row tile when
    // there is an odd number: it computes zeros from the copy engine's fill and writes nothing). Launched
    // without a cluster, the same kernel runs one block a tile.
    // The blocks walk w = blockIdx.x, + gridDim.x, ... either way: a pair's cluster is blocks 2 c and 2 c + 1
    // (rank = blockIdx.x % 2) and its grid even, so w / 2 walks the pairs' items and w % 2 is the rank
    // (nothing more a consumer thread holds beside its accumulators: more made ptxas spill them).
    constexpr bool CAN_PAIR = sizeof(T) == 2 && BM == 128 && BN >= 128;
    uint32_t cluster_blocks = 1;
    if constexpr (CAN_PAIR) asm("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(cluster_blocks));
    const int pair = CAN_PAIR && cluster_blocks == 2 ? 1 : 0;  // (a shift)
    const int item_rows = (tiles_m + pair) >> pair;  // row tiles, or pairs of them, a column of work items
    const int works = (item_rows * tiles_n * splits * batch.count) << pair;
    auto item = [&](int w) {
        Work wk = work_item(w >> pair, item_rows, tiles_n);
        wk.tm = (wk.tm << pair) + (w & pair);
        return wk;
    };
    // C stored transposed (c_store 2): 16-bit inputs, int8 with int32 C, TF32 tiles of at most 64 columns and
    // the TF32 tiles reading A M-major (at most 128 columns; the wider K-major TF32 bodies, with their
    // recomputation of non-finite outputs, have no registers left for the strided epilogue: ptxas spilled
    // them, where the 128 x 128 tile reading A from registers did not, nvcc 13.0). A tile narrower than a
    // 128-byte box of C (16 or 32 columns of 16-bit C, 16 of float32) leaves by plain stores
    if (BN * (int)sizeof(Out) < 128 && c_store == 1) c_store = 0;
    const bool c_trans = (!TF32 || BN <= 64 || A_MMAJOR) && c_store == 2;

    if (tid == 0) {
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
        if (c_store == 1) tma_prefetch_map(&map_c);
        for (int s = 0; s < STAGES; ++s) {
            bar_init(bars + 8 * s, 1);
            bar_init(empty + 8 * s, Cfg::CONSUMERS * (pair ? 2 : 1));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (pair)
        cluster_sync();  // the partner's barriers exist before any copy or arrival reaches them
    else
        __syncthreads();
    // (the set-up above touches shared memory and parameters alone: it overlaps the grid before's flush)
    gpumat::wait_for_previous_grid();

    if (wg == 0) {
        // two consumers: their registers come from the producer's (one block an SM, 168 a thread at launch)
        if constexpr (Cfg::CONSUMERS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int stage = 0, phase = 0;
            for (int w = blockIdx.x; w < works; w += gridDim.x) {
                const Work wk = item(w);
                const int matrix = wk.layer / splits;
                const int k_begin = (wk.layer - matrix * splits) * k_chunk;
                const int k_tiles = (min(K, k_begin + k_chunk) - k_begin + BK - 1) / BK;
                // the matrices of A and B this item reads: its own, or the one a shared operand has
                const int za = batch.a_batched ? matrix : 0, zb = batch.b_batched ? matrix : 0;
                for (int t = 0; t < k_tiles; ++t) {
                    bar_wait(empty + 8 * stage, phase ^ 1);
                    const uint32_t full = bars + 8 * stage;
                    const uint32_t dst = base + stage * STAGE_BYTES;
                    const int k = k_begin + t * BK;
                    bar_expect(full, STAGE_BYTES);
                    if constexpr (A_MMAJOR) {
                        // A stored as K rows of M: the tile's rows in boxes of 128 bytes of M (64 halves or 32
                        // floats) x BK k rows, box j at j * BK * 128 bytes: consumer c's 64 rows in its 8 KiB
                        // (one box of halves, two of floats), one swizzle atom across M
                        constexpr int BOX_M = BK_BYTES / (int)sizeof(T), A_BOX = BK * BK_BYTES;
#pragma unroll
                        for (int j = 0; j < BM / BOX_M; ++j)
                            tma_load(dst + j * A_BOX, &map_a, wk.tm * BM + BOX_M * j, k, za, full);
                    } else {
                        tma_load(dst, &map_a, k, wk.tm * BM, za, full);  // BM rows of 128 bytes of K
                    }
                    if constexpr (B_KMAJOR) {
                        if (pair) {  // this block's half of B's BN rows (map_b's boxes are BN / 2 rows), into both
                            const int half = (int)(blockIdx.x & 1) * (BN / 2);
                            tma_load_multicast(dst + A_BYTES + half * BK_BYTES, &map_b, k, wk.tn * BN + half, zb,
                                               full, 3);
                        } else {
                            tma_load(dst + A_BYTES, &map_b, k, wk.tn * BN, zb, full);  // BN rows of 128 bytes
                        }
                    } else {
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j) {
                            const uint32_t box = dst + A_BYTES + j * MN_BOX_BYTES;
                            if (!pair)
                                tma_load(box, &map_b, wk.tn * BN + 64 * j, k, zb, full);
                            else if (j / (BN / 128) == (int)(blockIdx.x & 1))  // this block's half, into both
                                tma_load_multicast(box, &map_b, wk.tn * BN + 64 * j, k, zb, full, 3);
                        }
                    }
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        if constexpr (Cfg::CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int c = wg - 1;                      // consumer: rows 64 c .. 64 c + 63 of the tile
        const int lt = tid % 128, warp = lt / 32, lane = lt % 32;
        int stage = 0, phase = 0;
        int boxes = 0;  // TMA stores of C this consumer has issued (its two buffers alternate)
        Acc d[ACC];
        // TF32 with A stored M-major: this thread's A elements of a k step, read from the stage into registers
        // (run_regs). Its rows m = 16 warp + lane / 4 (+ 8) lie in the consumer's box warp / 2 (32 floats of M
        // x 32 k rows, 4 KiB), its k = lane % 4 (+ 4) at 128 bytes a k row, the 16-byte unit of M swizzled by
        // k % 8. Read as they sit, a warp's 32 loads of one register would fall on 16 banks twice; so the
        // upper half-warp reads its k + 4 element first and its k element second (two selects put them
        // back): each load then covers the 32 banks once. a_off[h][x]: load x of row m + 8 h, at + 1024 a k step.
        uint32_t a_off[2][2] = {};
        constexpr int KSTEPS = BK_BYTES / KSTEP_BYTES;
        uint32_t frag[2][KSTEPS][4] = {};  // two buffers of a k tile's A elements (see the wait below)
        if constexpr (TF32 && A_MMAJOR) {
            const int g = lane / 4, q = lane % 4, hi = g >= 4 ? 4 : 0;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                    const int m = 16 * (warp & 1) + g + 8 * h, k = q + (x == 0 ? hi : 4 - hi);
                    a_off[h][x] = (warp >> 1) * 4096 + k * 128 + (((m >> 2) ^ k) << 4) + (m & 3) * 4;
                }
        }
        // a stage is done with: this block's consumers arrive on its empty barrier, and a pair's on the
        // partner's too (its producer writes half of B into this block's stages)
        auto release = [&](int s) {
            bar_arrive(empty + 8 * s);
            if (pair) bar_arrive_remote(empty + 8 * s, (blockIdx.x & 1) ^ 1u);
        };
        for (int w = blockIdx.x; w < works; w += gridDim.x) {
            const Work wk = item(w);
            const int matrix = wk.layer / splits;
            const int k_begin = (wk.layer - matrix * splits) * k_chunk;
            const int k_tiles = (min(K, k_begin + k_chunk) - k_begin + BK - 1) / BK;
            // this item's C: a split's partial layer or a matrix of the batch (one of the two is 0)
            Out* const Cz = C + wk.layer * batch.c_layer;
            if constexpr (EPI && !TF32) {  // (TF32's body has no registers to spare for it: it spilled)
                double beta = ep.beta;  // through empty asm, as below: no copy of the work loop for it
                asm volatile("" : "+d"(beta));
                // (a hint for row-major C; a transposed C is a few rows of few hundred KiB: not asked for)
                if (beta != 0.0 && !c_trans) prefetch_c<Out, BN>(Cz, ldc, wk.tm * BM + 64 * c, wk.tn * BN, M, N, lt);
            }
#pragma unroll
            for (int i = 0; i < ACC; ++i) d[i] = Acc(0);
            int prev = -1;
            for (int t = 0; t < k_tiles; ++t) {
                bar_wait(bars + 8 * stage, phase);
                // this consumer's 64 rows of A: 64 rows of 128 bytes of K, or (A_MMAJOR) the box of their 64
                // columns of M; both 8 KiB from the stage's start, c * 8 KiB in
                const uint32_t a0 = base + stage * STAGE_BYTES + c * (64 * BK_BYTES);
                const uint32_t b0 = base + stage * STAGE_BYTES + A_BYTES;
                // one k tile's wgmma group; BUF: which of the two register buffers holds TF32's A elements
                auto issue = [&](auto buf_constant) {
                    [[maybe_unused]] constexpr int BUF = decltype(buf_constant)::value;
                    if constexpr (TF32 && A_MMAJOR) {
                        const bool upper = lane >= 16;
#pragma unroll
                        for (int ks = 0; ks < KSTEPS; ++ks) {
                            uint32_t x[2][2];
#pragma unroll
                            for (int h = 0; h < 2; ++h)
#pragma unroll
                                for (int j = 0; j < 2; ++j)
                                    asm volatile("ld.shared.b32 %0, [%1];\n"
                                                 : "=r"(x[h][j]) : "r"(a0 + a_off[h][j] + 1024 * ks));
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                frag[BUF][ks][h] = upper ? x[h][1] : x[h][0];      // k = lane % 4
                                frag[BUF][ks][h + 2] = upper ? x[h][0] : x[h][1];  // k = lane % 4 + 4
                            }
                        }
                    }
                    wgmma_fence();
#pragma unroll
                    for (int ks = 0; ks < KSTEPS; ++ks) {
                        // K-major operands: rows of 128 bytes, 8-row swizzle atoms 1024 bytes apart (the stride
                        // offset), a step 32 bytes along the row. MN-major (16-bit): 128-byte rows of M or N, one
                        // a k; a step advances 16 k rows (2048 bytes) and reads two 8-row atoms (the stride
                        // offset, 1024, along K); the leading offset is the next box of 64 columns (B's next 64
                        // of N; an A of 64 rows is one box wide and never reads it)
                        const uint64_t db = B_KMAJOR ? descriptor(b0 + KSTEP_BYTES * ks, 16, 1024)
                                                     : descriptor(b0 + 2048 * ks, MN_BOX_BYTES, 1024);
                        const uint64_t da = A_MMAJOR ? descriptor(a0 + 2048 * ks, MN_BOX_BYTES, 1024)
                                                     : descriptor(a0 + KSTEP_BYTES * ks, 16, 1024);
                        if constexpr (TF32 && A_MMAJOR)
                            Wgmma<float>::run_regs(d, frag[BUF][ks], db);
                        else
                            Wgmma<T>::template run<A_MMAJOR, B_KMAJOR>(d, da, db);
                    }
                    wgmma_commit();
                    wgmma_wait<1>();  // the previous k tile's group is done: its stage can be refilled
                    if constexpr (TF32 && A_MMAJOR) {
                        // A wgmma reads its A registers while it runs, and the compiler does not know: to it
                        // the elements are dead once issued, so it would load the next tile's into the same
                        // registers under the running group. The other buffer, whose group the wait has just
                        // ended, passes through an empty asm here: each buffer then stays live from its loads
                        // until after the next tile's, in registers of its own, and the next tile fills the
                        // one whose group is over (an empty asm on the running group's buffer would make
                        // ptxas wait for that group: it took 1.7x as long)
#pragma unroll
                        for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
                            for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(frag[1 - BUF][ks][i]));
                    }
                };
                if constexpr (TF32 && A_MMAJOR) {  // the buffers in turn: a k tile's group reads one while
                    if (t & 1)                     // the next tile's loads fill the other
                        issue(std::integral_constant<int, 1>{});
                    else
                        issue(std::integral_constant<int, 0>{});
                } else {
                    issue(std::integral_constant<int, 0>{});
                }
                if (prev >= 0 && lt == 0) release(prev);
                prev = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            if (prev >= 0 && lt == 0) release(prev);

            // (a pair's row tile past C's last row writes nothing: every way out guards or clips its rows by M;
            // skipping the epilogue instead made ptxas spill the 128 x 256 tile's accumulators)
            // Accumulator d[4 j + e]: row 16 warp + lane/4 (+8 for e >= 2), column 8 j + 2 (lane%4) + e%2.
            const int row = wk.tm * BM + 64 * c + 16 * warp + lane / 4;  // d[4 j + x] is C[row + 8 (x / 2),
            const int col = wk.tn * BN + 2 * (lane % 4);                 //   col + 8 j + x % 2]
            // INT8: C is the sums' residues modulo the Ozaki modulus of this product (the batch's), each taken as
            // it is stored (taken all at once beforehand, their temporaries made ptxas spill the 128 x 256 tile)
            const int s8_modulus = RESIDUES ? S8_MODULI[matrix] : 0;  // (product `matrix` of the batch: the l-th)
            const double s8_inverse = RESIDUES ? __drcp_rn((double)s8_modulus) : 0.0;
            // The tile's C from its accumulators v (d, or an int8 product's sums as floats for a float C):
            // the epilogue, then C's stores (a return ends the tile).
            auto finish_tile = [&](auto& v) {
                constexpr bool FLOATS = std::is_same_v<std::remove_reference_t<decltype(v[0])>, float>;
                if constexpr (TF32) {  // outputs left infinite or NaN by the tensor cores: FP32 (see the header)
                    if (warpgroup_any(3 + c, any_nonfinite(v)))
                        recompute_nonfinite<A_MMAJOR>(v, c_bufs + 2 * c * C_BUF_BYTES, c, lt, row, col, M, N, A + matrix * sa, lda,
                                            B + matrix * sb, ldb, k_begin, min(K, k_begin + k_chunk));
                }
                if constexpr (!EPI && FLOATS) {  // the plain body's one epilogue term, alpha (1: exact either way)
                    const float alpha = (float)ep.alpha;
#pragma unroll
                    for (int i = 0; i < ACC; ++i) v[i] *= alpha;
                }
                if constexpr (EPI) {
                    // The epilogue's switches pass through empty asm: nvcc 13.0 otherwise clones the work
                    // loop (main loop included) for each value they can take.
                    gpumat::Epilogue e = ep;
                    asm volatile("" : "+d"(e.alpha), "+d"(e.beta), "+r"(e.bias_along), "+r"(e.bias_f32), "+r"(e.activation));
                    constexpr int CHUNK = finish_chunk<ACC, TF32>();
                    if constexpr (ACT >= 0)
                        finish<Out, CHUNK>(v, e.fixed<Out, float, ACT>(), row, col, M, N, Cz, ldc, c_trans);
                    else
                        finish_with<Out, CHUNK>(v, e, row, col, M, N, Cz, ldc, c_trans);
                }
                if (c_store == 1) {
                    constexpr int CW = 128 / sizeof(Out);  // columns in one 128-byte box row
#pragma unroll
                    for (int q = 0; q < BN / CW; ++q, ++boxes) {
                        // the consumer's two buffers in turn, box after box across its tiles (a tile of one
                        // box, 64 columns of 16-bit C, would otherwise refill the buffer its last store reads)
                        const uint32_t buf = c_bufs + (2 * c + (boxes & 1)) * C_BUF_BYTES;
                        if (lt == 0) store_wait_read<1>();  // the store that read this buffer two boxes ago
                        warpgroup_sync(1 + c);
#pragma unroll
                        for (int jj = 0; jj < CW / 8; ++jj) {
                            const int j = q * (CW / 8) + jj;
                            const int byte = (8 * jj + 2 * (lane % 4)) * (int)sizeof(Out);
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                const int r = 16 * warp + lane / 4 + 8 * h;
                                // the 128-byte swizzle: 16-byte unit u of row r sits at unit u ^ (r % 8)
                                const uint32_t at = buf + r * 128 + ((((byte >> 4) ^ (r & 7))) << 4) + (byte & 15);
                                if constexpr (RESIDUES) {
                                    const int x = gpumat::symmetric_residue(v[4 * j + 2 * h], s8_modulus, s8_inverse);
                                    const int y = gpumat::symmetric_residue(v[4 * j + 2 * h + 1], s8_modulus, s8_inverse);
                                    st_shared_pair<Out>(at, x, y);
                                } else {
                                    st_shared_pair<Out>(at, v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
                                }
                            }
                        }
                        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to the copy engine
                        warpgroup_sync(1 + c);
                        if (lt == 0) {
                            tma_store(&map_c, buf, wk.tn * BN + q * CW, wk.tm * BM + 64 * c, wk.layer);
                            store_commit();
                        }
                    }
                    return;
                }
                if constexpr (RESIDUES) {  // the int8 residues by plain stores (c_store 0), a pair at a time where aligned
                    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 1) == 0 && (ldc & 1) == 0;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row + 8 * h;
                        if (r >= M) continue;
                        int8_t* crow = reinterpret_cast<int8_t*>(Cz) + (long long)r * ldc;
#pragma unroll
                        for (int j = 0; j < ACC / 4; ++j) {
                            const int cc = col + 8 * j;
                            if (cc >= N) continue;
                            const int x = gpumat::symmetric_residue(v[4 * j + 2 * h], s8_modulus, s8_inverse);
                            const int y = gpumat::symmetric_residue(v[4 * j + 2 * h + 1], s8_modulus, s8_inverse);
                            if (vec_c && cc + 1 < N) {
                                *reinterpret_cast<char2*>(crow + cc) = make_char2((signed char)x, (signed char)y);
                            } else {
                                crow[cc] = (int8_t)x;
                                if (cc + 1 < N) crow[cc + 1] = (int8_t)y;
                            }
                        }
                    }
                    return;
                } else {  // (C from float accumulators through Dtype<Out>, or the int32 sums as they are)
                const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & (2 * sizeof(Out) - 1)) == 0 && (ldc & 1) == 0;
                if constexpr (sizeof(Out) == 2 && BN >= 128) {
                    if (!c_trans && !vec_c && N >= BN) {  // a 16-bit C of rows off 4 bytes, staged (header)
                        // the warp's 16 rows of a box of 64 columns, in 2 KiB of its own 4 KiB of the consumer's
                        // buffers (recompute_nonfinite shares the 16 KiB out by thread: this warp's threads the
                        // same 4 KiB), in the 128-byte swizzle as for a TMA store
                        const uint32_t slice = c_bufs + 2 * c * C_BUF_BYTES + 4096 * warp;
                        const int row0 = wk.tm * BM + 64 * c + 16 * warp;
                        auto staged = [&](int r, int e) {  // element e of staged row r
                            const int byte = 2 * e;
                            return slice + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
                        };
#pragma unroll
                        for (int q = 0; q < BN / 64; ++q) {
                            if (wk.tn * BN + 64 * q >= N) break;  // the tile's boxes past C's last column
                            __syncwarp();  // every lane is done reading the last box (or its recomputation's share)
#pragma unroll
                            for (int jj = 0; jj < 8; ++jj) {
                                const int j = 8 * q + jj;
#pragma unroll
                                for (int h = 0; h < 2; ++h) {
                                    const int r = lane / 4 + 8 * h;
                                    st_shared_pair<Out>(staged(r, 8 * jj + 2 * (lane % 4)), v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
                                }
                            }
                            __syncwarp();
                            // a row at a time, lane after lane along it: 64 consecutive bytes a store instruction
                            const int col0 = wk.tn * BN + 64 * q;
#pragma unroll 4
                            for (int r = 0; r < 16 && row0 + r < M; ++r) {
                                Out* crow = Cz + (long long)(row0 + r) * ldc + col0;
#pragma unroll
                                for (int e = lane; e < 64; e += 32)
                                    if (col0 + e < N) crow[e] = ld_shared_element<Out>(staged(r, e));
                            }
                        }
                        return;
                    }
                }
                if (c_trans) {  // C stored transposed: C[i, j] at Cz + j * ldc + i
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row + 8 * h;
                        if (r >= M) continue;
#pragma unroll
                        for (int j = 0; j < ACC / 4; ++j)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int cc = col + 8 * j + e;
                                if (cc < N) Cz[(long long)cc * ldc + r] = c_value<Out>(v[4 * j + 2 * h + e]);
                            }
                    }
                    return;
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = row + 8 * h;
                    if (r >= M) continue;
                    Out* crow = Cz + (long long)r * ldc;
#pragma unroll
                    for (int j = 0; j < ACC / 4; ++j) {
                        const int cc = col + 8 * j;
                        if (cc < N) store_c_pair<Out>(crow + cc, v[4 * j + 2 * h], v[4 * j + 2 * h + 1], cc + 1 < N, vec_c);
                    }
                }
                }
            };
            if constexpr (DEQUANT) {  // int32 sums into a float C: each rounded once to float32, then as floats
                float f[ACC];
#pragma unroll
                for (int i = 0; i < ACC; ++i) f[i] = (float)d[i];
                finish_tile(f);
            } else {
                finish_tile(d);
            }
        }
        if (c_store == 1 && lt == 0) store_wait_all();  // C is written before the block (and its buffers) ends
    }
    if (pair) cluster_sync();  // neither block ends while the other may still copy into it or arrive on it
#else
    __trap();  // built for sm_90a only; gpumat never launches it elsewhere
#endif
}

}  // namespace

// matmul_wgmma<BM>x<BN>_<dtype>[_f32out](map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, batch,
// c_layer, batched, alpha, beta, bias, bias_step, bias_along, bias_f32, activation), BM x BN = 128 x 256,
// 128 x 128, 128 x 64, 64 x 64, 64 x 32 or 64 x 16: TMA + wgmma m64n<BN>k16, float32 accumulation, a
// producer warpgroup and BM / 64 consumer warpgroups, persistent blocks, C through TMA stores (c_store = 1;
// a tile row of C narrower than a 128-byte box leaves by plain stores instead), plain stores (0) or plain
// stores into C stored transposed (2). Block (128 (1 + BM / 64), 1, 1), one block an SM, 230,528 bytes of
// dynamic shared memory for the 128-row tiles, 230,656 for 64 x 64, 226,688 for 64 x 32 and 222,592 for
// 64 x 16 (Tile<BM, BN>::SMEM_BYTES);
// grid (min(work items, SMs), 1, 1) with work items = ceil(M/BM) * ceil(N/BN) * splits * batch; the 16-bit
// 128 x 128 and 128 x 256 entries also launched as clusters (2, 1, 1) of pairs of row tiles: grid
// (2 min(ceil(ceil(M/BM) / 2) * ceil(N/BN) * splits * batch, SMs / 2), 1, 1), map_b of the bt entries in
// 64 x BN / 2 boxes (each block loads half of B). C in the
// input dtype, or float32. map_a: 64 x BM boxes; map_b: 64 x 64 boxes (K rows of N) or, for the bt
// entries, 64 x BN (N rows of K).
//  * 128x256: tile 128 x 256 x 64, 4-stage ring of 48 KiB stages, 128 accumulators a consumer thread;
//    the large products' tile;
//  * 128x128: tile 128 x 128 x 64, 6-stage ring of 32 KiB stages, 64 accumulators a consumer thread;
//    twice the work items of the 256-wide tile, for mid-size products that leave SMs idle with it;
//  * 128x64: tile 128 x 64 x 64, 8-stage ring of 24 KiB stages, 32 accumulators a consumer thread; for
//    C of 64 columns or fewer (attention's values at head size 64, a layer's few outputs), where the
//    wider tiles compute mostly zeros;
//  * 64x64: tile 64 x 64 x 64, one consumer, 13-stage ring of 16 KiB stages, 32 accumulators a thread;
//    twice the work items of 128 x 64, for a layer on few tokens (swapped or not: the weight's 64 rows or
//    columns a tile), skinny and mid-size products whose 128-row tiles leave SMs idle;
//  * 64x32 and 64x16 (the *bt and *atbt entries alone: B read K-major, BN rows of 128 bytes): one consumer,
//    17 stages of 12 KiB or 20 of 10 KiB, 16 or 8 accumulators a thread; C by plain stores where a tile row
//    of it is under 128 bytes (16-bit C, and 64 x 16 with float32 C); for a swapped layer of few tokens,
//    whose stages then hold 8 KiB of the weight each (64 x 64: 13), and a C of few columns.
//
// matmul_wgmma<BM>x<BN>bt_<dtype>[_f32out]: the same with B given transposed (map_b over B's storage, N
// rows of K: C = A @ W.T for a row-major N x K matrix W, read in place, no transposed copy first).
//
// matmul_wgmma<BM>x<BN>at_<dtype>[_f32out]: the same with A given transposed and B row-major: map_a over
// A's storage, K rows of M (C = X.T @ B for a row-major K x M matrix X, read in place, no transposed copy
// first; a linear layer's weight gradient X.T @ dY), in 64 x 64 boxes (64 columns of M x 64 k rows, BM / 64
// a stage: one each consumer's rows) read M-major through the wgmma's imm-trans-a, as the row-major B
// boxes are read N-major. Launch, shared memory, grid, tiles and map_b as above.
//
// matmul_wgmma<BM>x<BN>atbt_<dtype>[_f32out]: A and B both given transposed (C = X.T @ W.T, and a plain
// product written into a transposed C, computed as C.T = B.T @ A.T): map_a as for the at entries, map_b
// as for the bt entries. Each entry adds about 280 KB to the module.
#define GPUMAT_WGMMA_HALF(NAME, BM, BN, T, OUT, A_MMAJOR, B_KMAJOR)                                          \
    extern "C" __global__ void __launch_bounds__(Tile<BM, BN>::THREADS, 1) NAME(                              \
        const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,                    \
        const __grid_constant__ TensorMap map_c, OUT* __restrict__ C, int M, int N, int K, long long ldc,     \
        int k_chunk, int c_store, int batch, long long c_layer, int batched, GPUMAT_EPILOGUE_PARAMS)          \
    {                                                                                                         \
        const gpumat::Epilogue ep = GPUMAT_EPILOGUE_ARGS;                                                     \
        const Batch products(batch, c_layer, batched);                                                        \
        const T* none = nullptr;                                                                              \
        if (scales_only(ep))                                                                                  \
            gemm<BM, BN, T, OUT, false, A_MMAJOR, B_KMAJOR>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk,    \
                                                             c_store, products, none, 0, 0, none, 0, 0, ep);  \
        else                                                                                                  \
            gemm<BM, BN, T, OUT, true, A_MMAJOR, B_KMAJOR>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk,     \
                                                             c_store, products, none, 0, 0, none, 0, 0, ep);  \
    }
