// cuBLASLt GEMMs (see gemm_lt.h).
#include "gemm_lt.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "config_cache.h"
#include "library_util.h"

namespace taso {
namespace cuda {
namespace {

// A row-major operand as cuBLASLt's column-major matrix: rows x cols with leading
// dimension ld, used as is (op N) or transposed (op T).
struct ColMajor {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  cublasOperation_t op = CUBLAS_OP_N;
  bool ok = false;
};

// Dims of size 1 take a stride that keeps the layout valid whatever it was.
MatrixLayout normalised(MatrixLayout m) {
  if (m.cols == 1) m.col_stride = 1;
  if (m.rows == 1) m.row_stride = m.col_stride == 1 ? std::max<int64_t>(m.row_stride, m.cols) : 1;
  return m;
}

// Row-major X (rows r, cols c) read as column-major: with col stride 1 its memory is the
// column-major c x r matrix X^T (ld = row stride); with row stride 1 it is X itself
// (r x c, ld = col stride). `want_transposed` says which of X^T (true) or X the product
// needs; the op makes up the difference.
ColMajor col_major(const MatrixLayout& raw, bool want_transposed) {
  MatrixLayout m = normalised(raw);
  ColMajor cm;
  if (m.col_stride == 1 && m.row_stride >= std::max<int64_t>(m.cols, 1)) {
    cm = {static_cast<uint64_t>(m.cols), static_cast<uint64_t>(m.rows), m.row_stride,
          want_transposed ? CUBLAS_OP_N : CUBLAS_OP_T, true};
  } else if (m.row_stride == 1 && m.col_stride >= std::max<int64_t>(m.rows, 1)) {
    cm = {static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols), m.col_stride,
          want_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, true};
  }
  return cm;
}

// Row-major D = A B is column-major D^T = B^T A^T: cuBLASLt's A is our B^T, its B our A^T.
struct Mapping {
  ColMajor a, b, c, d;
};

Mapping map_config(const LtGemmConfig& cfg) {
  Mapping m;
  m.a = col_major(cfg.b, true);
  m.b = col_major(cfg.a, true);
  m.d = col_major(cfg.d, true);
  m.c = cfg.residual ? col_major(cfg.c, true) : m.d;
  return m;
}

int alignment(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 2 && v % a) a /= 2;
  return a;
}


// RLFLOW_GEMM_ALGO_CACHE: a file of lines "key<TAB>the algorithm's eight words (hex) ms"
// (keys name the device and cuBLASLt's version; config_cache.h). A choice read from it is
// checked against the GEMM before it is used (cublasLtMatmulAlgoCheck).
constexpr char kCacheEnv[] = "RLFLOW_GEMM_ALGO_CACHE";

ConfigCache<cublasLtMatmulAlgo_t>& cache() {
  static ConfigCache<cublasLtMatmulAlgo_t> c([] {
    std::map<std::string, cublasLtMatmulAlgo_t> m;
    for (const auto& [key, value] : read_choices(kCacheEnv)) {
      unsigned long long w[8];
      if (std::sscanf(value.c_str(), "%llx %llx %llx %llx %llx %llx %llx %llx", &w[0], &w[1], &w[2], &w[3], &w[4],
                      &w[5], &w[6], &w[7]) != 8)
        continue;
      cublasLtMatmulAlgo_t algo;
      for (int i = 0; i < 8; ++i) algo.data[i] = w[i];
      m[key] = algo;
    }
    return m;
  }());
  return c;
}

void save_choice(const std::string& key, const cublasLtMatmulAlgo_t& algo, float ms) {
  std::string value;
  char word[32];
  for (uint64_t w : algo.data) {
    std::snprintf(word, sizeof word, "%llx ", static_cast<unsigned long long>(w));
    value += word;
  }
  std::snprintf(word, sizeof word, "%g", ms);
  append_choice(kCacheEnv, key, value + word);
}

void create_layout(cublasLtMatrixLayout_t* desc, cudaDataType_t type, const ColMajor& cm, int64_t batch,
                   int64_t batch_stride) {
  RLFLOW_CUBLAS(cublasLtMatrixLayoutCreate(desc, type, cm.rows, cm.cols, cm.ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    RLFLOW_CUBLAS(cublasLtMatrixLayoutSetAttribute(*desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    RLFLOW_CUBLAS(cublasLtMatrixLayoutSetAttribute(*desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &batch_stride, sizeof batch_stride));
  }
}

}  // namespace

size_t gemm_algo_cache_size() { return cache().size(); }

bool lt_gemm_supported(const LtGemmConfig& cfg) {
  if (cfg.a.rows != cfg.d.rows || cfg.b.cols != cfg.d.cols || cfg.a.cols != cfg.b.rows) return false;
  if (cfg.batch < 1 || cfg.batch > INT32_MAX) return false;
  Mapping m = map_config(cfg);
  if (!m.a.ok || !m.b.ok || !m.c.ok || !m.d.ok || m.d.op != CUBLAS_OP_N || m.c.op != CUBLAS_OP_N) return false;
  if (cfg.batch > 1) {
    if (cfg.a.batch_stride < 0 || cfg.b.batch_stride <= 0 || cfg.d.batch_stride <= 0) return false;
    if (cfg.residual && cfg.c.batch_stride <= 0) return false;
  }
  for (const MatrixLayout* l : {&cfg.a, &cfg.b, &cfg.d})
    if (l->rows <= 0 || l->cols <= 0) return false;
  return true;
}

LtGemm::LtGemm(const LtGemmConfig& cfg, const LtGemmPointers& ptrs) : cfg_(cfg), p_(ptrs) {
  if (!lt_gemm_supported(cfg)) throw UnsupportedGraphError("cuBLASLt cannot run this GEMM layout");
  Context& ctx = context();

  const Mapping m = map_config(cfg);
  RLFLOW_CUBLAS(cublasLtMatmulDescCreate(&desc_, cublas_compute_type(cfg.math), CUDA_R_32F));
  RLFLOW_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &m.a.op, sizeof m.a.op));
  RLFLOW_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &m.b.op, sizeof m.b.op));
  cublasLtEpilogue_t epi = cfg.bias ? (cfg.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (cfg.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  RLFLOW_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (cfg.bias)
    RLFLOW_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p_.bias, sizeof p_.bias));
  const cudaDataType_t type = cuda_storage_type(cfg.math);
  create_layout(&a_desc_, type, m.a, cfg.batch, cfg.b.batch_stride);
  create_layout(&b_desc_, type, m.b, cfg.batch, cfg.a.batch_stride);
  create_layout(&d_desc_, type, m.d, cfg.batch, cfg.d.batch_stride);
  create_layout(&c_desc_, type, m.c, cfg.batch, cfg.residual ? cfg.c.batch_stride : cfg.d.batch_stride);

  // Plain string building, no iostreams: the module shares its process with other C++
  // runtimes (see conv_op.cc).
  std::string key = ctx.device_name + "|lt" + std::to_string(cublasLtGetVersion()) + "|" + math_mode_name(cfg.math) +
                    "|" + std::to_string(cfg.batch) + "|" +
                    std::to_string(cfg.bias) + std::to_string(cfg.residual) + std::to_string(cfg.relu);
  for (const ColMajor* cm : {&m.a, &m.b, &m.c, &m.d})
    key += "|" + std::to_string(cm->rows) + "," + std::to_string(cm->cols) + "," + std::to_string(cm->ld) + "," +
           std::to_string(static_cast<int>(cm->op));
  for (int64_t s : {cfg.a.batch_stride, cfg.b.batch_stride, cfg.c.batch_stride, cfg.d.batch_stride})
    key += "," + std::to_string(s);
  for (const void* p : {p_.a, p_.b, p_.c ? p_.c : static_cast<const void*>(p_.d), static_cast<const void*>(p_.d),
                        p_.bias})
    key += "," + std::to_string(alignment(p));
  if (auto cached = cache().find(key)) {  // (one read from the file may not fit this build or GEMM: then tuned)
    cublasLtMatmulHeuristicResult_t check;
    if (cublasLtMatmulAlgoCheck(ctx.cublaslt, desc_, a_desc_, b_desc_, c_desc_, d_desc_, &*cached, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= ctx.cublas_workspace_bytes) {
      algo_ = *cached;
      return;
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  RLFLOW_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = ctx.cublas_workspace_bytes;
  RLFLOW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p_.b},  // cuBLASLt's A is our B
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p_.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p_.c ? p_.c : static_cast<const void*>(p_.d)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p_.d}};
  for (const auto& [attr, ptr] : aligned) {
    uint32_t bytes = static_cast<uint32_t>(alignment(ptr));
    RLFLOW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t found[kCandidates];
  int returned = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, desc_, a_desc_, b_desc_, c_desc_, d_desc_,
                                                         pref, kCandidates, found, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || returned == 0)
    throw UnsupportedGraphError("cuBLASLt offers no algorithm for this GEMM");
  const bool log = cfg_.log;
  if (log) std::fprintf(stderr, "rlflow gemm %s: %d candidates\n", key.c_str(), returned);
  float best = -1;
  for (int i = 0; i < returned; ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t& algo = found[i].algo;
    float ms = time_calls_ms([&](cudaStream_t s) { return enqueue(algo, s) == CUBLAS_STATUS_SUCCESS; }, ctx.stream);
    if (log) std::fprintf(stderr, "rlflow gemm tune %s candidate %d: %.4f ms\n", key.c_str(), i, ms);
    if (ms >= 0 && (best < 0 || ms < best)) {
      best = ms;
      algo_ = algo;
    }
  }
  if (best < 0) throw UnsupportedGraphError("no cuBLASLt algorithm ran for this GEMM");
  cache().put(key, algo_);
  save_choice(key, algo_, best);
}

LtGemm::~LtGemm() {
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  for (cublasLtMatrixLayout_t l : {a_desc_, b_desc_, c_desc_, d_desc_})
    if (l) cublasLtMatrixLayoutDestroy(l);
}

cublasStatus_t LtGemm::enqueue(const cublasLtMatmulAlgo_t& algo, cudaStream_t s) const {
  Context& ctx = context();
  const float alpha = cfg_.alpha, beta = cfg_.residual ? 1.f : 0.f;
  const void* c = cfg_.residual ? p_.c : p_.d;
  // cuBLASLt's A is our B and its B our A (column-major D^T = B^T A^T).
  return cublasLtMatmul(ctx.cublaslt, desc_, &alpha, p_.b, a_desc_, p_.a, b_desc_, &beta, c, c_desc_, p_.d, d_desc_,
                        &algo, ctx.cublas_workspace, ctx.cublas_workspace_bytes, s);
}

void LtGemm::run(cudaStream_t s) const { RLFLOW_CUBLAS(enqueue(algo_, s)); }

bool LtGemm::launch(cudaStream_t s) const { return enqueue(algo_, s) == CUBLAS_STATUS_SUCCESS; }

}  // namespace cuda
}  // namespace taso
