// A table shard whose rows live in a file on local disk, with a RAM cache of at most
// `cache_rows` rows in front of it (etj_trainer/kernels/disk_table.py says what it is for
// and how it is used; this file is the kernels).
//
// Each row is one fixed-size record in the file: the weight row (`dim` float32) followed
// by its optimizer slot row (`slot_width` float32: 0 for SGD, 1 for row-wise Adagrad,
// `dim` for Adagrad), at offset row * record_bytes. The file is created sparse and
// truncated at creation: it is a cache of the state, never the state (checkpoints export
// the rows). A row never written reads as zeros with its slots at `slot_init`, so a
// table needs no pass over its file to start; the Python side imports initial values.
//
// The cache is CLOCK (second chance) with write-back: a hit sets one reference byte, a
// miss takes the slot under the hand, skipping (and clearing) referenced ones, and
// writes the victim back only if it is dirty. Every op holds the table's one mutex for
// its whole run, so a lookup and an update of the same row never interleave, and no
// pointer into the cache is held across another row's load (a cache of one row is
// correct, only slow).
//
// The optimizer math is TensorFlow's sparse kernels' (training_ops.cc), element by
// element in the same order, so a float32 row follows them bitwise:
//   sgd:             w -= g * lr
//   adagrad:         a += g * g;            w -= lr * g / (sqrt(a) + epsilon)
//   rowwise_adagrad: a += sum(g * g) / dim; w -= lr * g / (sqrt(a) + epsilon)
// Gradient rows are applied in order, one by one, as the fused kernels do: repeated ids
// are applied repeatedly (the wrapper sums them first when asked, as optim.dedup does).
//
// A checkpoint of a shard is written by the ps that holds it (EtjDiskTableSave): a tensor
// bundle of slices of `piece_rows` rows, each read from the table and appended to the
// bundle's data file before the next is read, so a save holds one piece in RAM, never the
// shard (TensorFlow's SaveV2 takes every tensor it writes as an input, all at once).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_slice.h"
#include "tensorflow/core/platform/mutex.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace etj {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::ResourceHandle;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::tstring;
namespace errors = tensorflow::errors;
namespace shape_inference = tensorflow::shape_inference;

// Counters of the stats op, in this order. Hits and misses count every access (lookups and
// updates); kLookups and kLookupMisses the lookups' alone (an update mostly finds the row
// its lookup just loaded, so the lookups' hit rate is the one that says what the cache saves).
enum Stat {
  kHits,
  kMisses,
  kDiskReads,
  kDiskWrites,
  kEvictions,
  kCached,
  kLookups,
  kLookupMisses,
  kStats
};

class DiskTable : public tensorflow::ResourceBase {
 public:
  DiskTable(std::string path, int64_t rows, int64_t dim, int64_t slot_width, int64_t cache_rows,
            float slot_init)
      : path_(std::move(path)),
        rows_(rows),
        dim_(dim),
        slot_width_(slot_width),
        record_(dim + slot_width),
        cache_rows_(cache_rows),
        slot_init_(slot_init),
        present_((rows + 63) / 64, 0),
        data_(cache_rows * (dim + slot_width)),
        slot_row_(cache_rows, -1),
        referenced_(cache_rows, 0),
        dirty_(cache_rows, 0) {
    index_.reserve(cache_rows);
  }

  ~DiskTable() override {
    if (fd_ >= 0) {
      close(fd_);
      // The file is scratch: the state is in the checkpoints.
      unlink(path_.c_str());
    }
  }

  Status Open() {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) return Errno("cannot create");
    if (ftruncate(fd_, static_cast<off_t>(rows_ * record_ * sizeof(float))) != 0) {
      return Errno("cannot size");
    }
    return Status();
  }

  std::string DebugString() const override {
    return "DiskTable(" + path_ + ", rows=" + std::to_string(rows_) +
           ", dim=" + std::to_string(dim_) + ", cache_rows=" + std::to_string(cache_rows_) + ")";
  }

  int64_t MemoryUsed() const override {
    return static_cast<int64_t>(data_.size() * sizeof(float) + present_.size() * 8 +
                              cache_rows_ * (sizeof(int64_t) + 2) + index_.size() * 32);
  }

  tensorflow::mutex* mu() { return &mu_; }
  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  int64_t slot_width() const { return slot_width_; }

  Status CheckIds(const int64_t* ids, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= rows_) {
        return errors::InvalidArgument("disk table ", path_, ": id ", ids[i],
                                       " out of range [0, ", rows_, ")");
      }
    }
    return Status();
  }

  // The cached record of `row` (loaded on a miss), valid until the next call.
  Status Get(int64_t row, float** record) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(row);
    if (it != index_.end()) {
      ++stats_[kHits];
      referenced_[it->second] = 1;
      *record = &data_[it->second * record_];
      return Status();
    }
    ++stats_[kMisses];
    int64_t slot;
    if (used_ < cache_rows_) {
      slot = used_++;
    } else {
      while (referenced_[hand_]) {
        referenced_[hand_] = 0;
        hand_ = (hand_ + 1) % cache_rows_;
      }
      slot = hand_;
      hand_ = (hand_ + 1) % cache_rows_;
      ++stats_[kEvictions];
      const int64_t victim = slot_row_[slot];
      if (dirty_[slot]) {
        Status s = Write(victim, &data_[slot * record_], 1);
        if (!s.ok()) return s;
        dirty_[slot] = 0;
      }
      index_.erase(victim);
    }
    float* dst = &data_[slot * record_];
    Status s = ReadOrDefault(row, dst, 1);
    if (!s.ok()) {
      // The slot is free again: nothing half-loaded stays in the cache.
      slot_row_[slot] = -1;
      if (slot == used_ - 1) --used_;
      return s;
    }
    slot_row_[slot] = row;
    referenced_[slot] = 1;
    index_[row] = slot;
    *record = dst;
    return Status();
  }

  // A lookup of `n` rows during which the misses went from `misses_before` on.
  void CountLookup(int64_t n, int64_t misses_before) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_[kLookups] += n;
    stats_[kLookupMisses] += stats_[kMisses] - misses_before;
  }
  int64_t misses() const TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stats_[kMisses]; }

  void MarkDirty(int64_t row) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) { dirty_[index_[row]] = 1; }

  // Rows [first, first + count) into `out` (count records), the cache's copies where it
  // has them; the cache is neither filled nor reordered (an export must not evict the
  // hot rows).
  Status Export(int64_t first, int64_t count, float* out) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Status s = ReadOrDefault(first, out, count);
    if (!s.ok()) return s;
    for (int64_t r = first; r < first + count; ++r) {
      auto it = index_.find(r);
      if (it != index_.end()) {
        std::memcpy(out + (r - first) * record_, &data_[it->second * record_],
                    record_ * sizeof(float));
      }
    }
    return Status();
  }

  // Rows [first, first + count) from `in` (count records), to disk and to the cache's
  // copies (which are then clean).
  Status Import(int64_t first, int64_t count, const float* in) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Status s = Write(first, in, count);
    if (!s.ok()) return s;
    for (int64_t r = first; r < first + count; ++r) {
      auto it = index_.find(r);
      if (it != index_.end()) {
        std::memcpy(&data_[it->second * record_], in + (r - first) * record_,
                    record_ * sizeof(float));
        dirty_[it->second] = 0;
      }
    }
    return Status();
  }

  void Stats(int64_t* out) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_[kCached] = used_;
    for (int i = 0; i < kStats; ++i) out[i] = stats_[i];
  }

 private:
  bool Present(int64_t row) const { return present_[row >> 6] >> (row & 63) & 1; }

  Status Errno(const char* what) const {
    return errors::Internal("disk table ", path_, ": ", what, ": ", std::strerror(errno));
  }

  // `count` records from `first` on: from the file where written, else the initial row.
  Status ReadOrDefault(int64_t first, float* dst, int64_t count) {
    int64_t r = first;
    const int64_t end = first + count;
    while (r < end) {
      // One read per run of written rows, one fill per run of unwritten ones.
      int64_t run = r;
      const bool present = Present(r);
      while (run < end && Present(run) == present) ++run;
      float* at = dst + (r - first) * record_;
      if (present) {
        Status s = Pread(at, (run - r) * record_, r * record_);
        if (!s.ok()) return s;
        stats_[kDiskReads] += run - r;
      } else {
        for (int64_t k = 0; k < run - r; ++k) {
          float* rec = at + k * record_;
          std::fill(rec, rec + dim_, 0.0f);
          std::fill(rec + dim_, rec + record_, slot_init_);
        }
      }
      r = run;
    }
    return Status();
  }

  Status Write(int64_t first, const float* src, int64_t count) {
    const char* p = reinterpret_cast<const char*>(src);
    size_t left = count * record_ * sizeof(float);
    off_t offset = static_cast<off_t>(first * record_ * sizeof(float));
    while (left > 0) {
      ssize_t n = pwrite(fd_, p, left, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errno("cannot write");
      p += n;
      left -= n;
      offset += n;
    }
    for (int64_t r = first; r < first + count; ++r) present_[r >> 6] |= uint64_t{1} << (r & 63);
    stats_[kDiskWrites] += count;
    return Status();
  }

  Status Pread(float* dst, int64_t floats, int64_t at_float) {
    char* p = reinterpret_cast<char*>(dst);
    size_t left = floats * sizeof(float);
    off_t offset = static_cast<off_t>(at_float * sizeof(float));
    while (left > 0) {
      ssize_t n = pread(fd_, p, left, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("cannot read");
      if (n == 0) return errors::DataLoss("disk table ", path_, ": short read");
      p += n;
      left -= n;
      offset += n;
    }
    return Status();
  }

  const std::string path_;
  const int64_t rows_, dim_, slot_width_, record_, cache_rows_;
  const float slot_init_;
  int fd_ = -1;
  tensorflow::mutex mu_;
  // One bit per row: written to the file at least once.
  std::vector<uint64_t> present_;
  std::vector<float> data_;
  std::vector<int64_t> slot_row_;
  std::vector<uint8_t> referenced_, dirty_;
  std::unordered_map<int64_t, int64_t> index_;
  int64_t used_ = 0, hand_ = 0;
  int64_t stats_[kStats] = {0};
};

// ---- ops ----------------------------------------------------------------------------

REGISTER_OP("EtjDiskTableHandle")
    .Output("handle: resource")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(shape_inference::ScalarShape);

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableHandle").Device(DEVICE_CPU),
                        tensorflow::ResourceHandleOp<DiskTable>);

REGISTER_OP("EtjDiskTableCreate")
    .Input("handle: resource")
    .Attr("path: string")
    .Attr("rows: int >= 1")
    .Attr("dim: int >= 1")
    .Attr("slot_width: int >= 0")
    .Attr("cache_rows: int >= 1")
    .Attr("slot_init: float = 0.0")
    .Attr("directory_env: string = ''")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

// The file of a table created with `path` in this process: with `directory_env` naming an
// environment variable set here, the file of that name in its directory instead (a ps pod
// names its disk-table volume there, and a process-backed node remaps it), else `path`.
static std::string FilePath(const std::string& path, const std::string& directory_env) {
  if (directory_env.empty()) return path;
  const char* dir = std::getenv(directory_env.c_str());
  if (dir == nullptr || *dir == '\0') return path;
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  return out + name;
}

class CreateOp : public OpKernel {
 public:
  explicit CreateOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("path", &path_));
    OP_REQUIRES_OK(c, c->GetAttr("rows", &rows_));
    OP_REQUIRES_OK(c, c->GetAttr("dim", &dim_));
    OP_REQUIRES_OK(c, c->GetAttr("slot_width", &slot_width_));
    OP_REQUIRES_OK(c, c->GetAttr("cache_rows", &cache_rows_));
    OP_REQUIRES_OK(c, c->GetAttr("slot_init", &slot_init_));
    std::string directory_env;
    OP_REQUIRES_OK(c, c->GetAttr("directory_env", &directory_env));
    path_ = FilePath(path_, directory_env);
    OP_REQUIRES(c, slot_width_ == 0 || slot_width_ == 1 || slot_width_ == dim_,
                errors::InvalidArgument("slot_width must be 0, 1 or dim (", dim_, "), not ",
                                        slot_width_));
  }

  void Compute(OpKernelContext* ctx) override {
    auto* table = new DiskTable(path_, rows_, dim_, slot_width_, std::min(cache_rows_, rows_),
                                slot_init_);
    Status s = table->Open();
    if (!s.ok()) {
      table->Unref();
      ctx->SetStatus(s);
      return;
    }
    OP_REQUIRES_OK(ctx, tensorflow::CreateResource(ctx, tensorflow::HandleFromInput(ctx, 0),
                                                   table));
  }

 private:
  std::string path_;
  int64_t rows_, dim_, slot_width_, cache_rows_;
  float slot_init_;
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableCreate").Device(DEVICE_CPU), CreateOp);

// The table of input 0, or an error naming what is missing.
static Status Table(OpKernelContext* ctx, tensorflow::core::RefCountPtr<DiskTable>* table) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), table);
}

REGISTER_OP("EtjDiskTableLookup")
    .Input("handle: resource")
    .Input("ids: int64")
    .Output("values: float")
    .Attr("dim: int >= 1")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle ids;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &ids));
      int64_t dim;
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
      c->set_output(0, c->Matrix(c->Dim(ids, 0), dim));
      return Status();
    });

class LookupOp : public OpKernel {
 public:
  explicit LookupOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    const Tensor& ids_t = ctx->input(1);
    OP_REQUIRES(ctx, ids_t.dims() == 1, errors::InvalidArgument("ids must be a vector"));
    const int64_t n = ids_t.dim_size(0), dim = table->dim();
    const int64_t* ids = ids_t.flat<int64_t>().data();
    OP_REQUIRES_OK(ctx, table->CheckIds(ids, n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dim}), &out));
    float* dst = out->flat<float>().data();
    tensorflow::mutex_lock lock(*table->mu());
    const int64_t misses = table->misses();
    for (int64_t i = 0; i < n; ++i) {
      float* record;
      OP_REQUIRES_OK(ctx, table->Get(ids[i], &record));
      std::memcpy(dst + i * dim, record, dim * sizeof(float));
    }
    table->CountLookup(n, misses);
  }
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableLookup").Device(DEVICE_CPU), LookupOp);

REGISTER_OP("EtjDiskTableApply")
    .Input("handle: resource")
    .Input("ids: int64")
    .Input("grads: float")
    .Input("lr: float")
    .Attr("optimizer: {'sgd', 'adagrad', 'rowwise_adagrad'}")
    .Attr("epsilon: float = 1e-7")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

class ApplyOp : public OpKernel {
 public:
  explicit ApplyOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("optimizer", &optimizer_));
    OP_REQUIRES_OK(c, c->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    const Tensor& ids_t = ctx->input(1);
    const Tensor& grads_t = ctx->input(2);
    const Tensor& lr_t = ctx->input(3);
    const int64_t dim = table->dim(), width = table->slot_width();
    OP_REQUIRES(ctx, ids_t.dims() == 1, errors::InvalidArgument("ids must be a vector"));
    const int64_t n = ids_t.dim_size(0);
    OP_REQUIRES(ctx,
                grads_t.dims() == 2 && grads_t.dim_size(0) == n && grads_t.dim_size(1) == dim,
                errors::InvalidArgument("grads must be [", n, ", ", dim, "], not ",
                                        grads_t.shape().DebugString()));
    OP_REQUIRES(ctx, lr_t.dims() == 0, errors::InvalidArgument("lr must be a scalar"));
    const int64_t want = optimizer_ == "sgd" ? 0 : optimizer_ == "adagrad" ? dim : 1;
    OP_REQUIRES(ctx, width == want,
                errors::InvalidArgument(optimizer_, " needs slot_width ", want,
                                        "; the table has ", width));
    const int64_t* ids = ids_t.flat<int64_t>().data();
    OP_REQUIRES_OK(ctx, table->CheckIds(ids, n));
    const float* grads = grads_t.flat<float>().data();
    const float lr = lr_t.scalar<float>()();
    const float eps = epsilon_;
    tensorflow::mutex_lock lock(*table->mu());
    for (int64_t i = 0; i < n; ++i) {
      float* w;
      OP_REQUIRES_OK(ctx, table->Get(ids[i], &w));
      const float* g = grads + i * dim;
      float* a = w + dim;
      if (optimizer_ == "sgd") {
        for (int64_t j = 0; j < dim; ++j) w[j] -= g[j] * lr;
      } else if (optimizer_ == "adagrad") {
        for (int64_t j = 0; j < dim; ++j) {
          a[j] += g[j] * g[j];
          w[j] -= lr * g[j] / (std::sqrt(a[j]) + eps);
        }
      } else {
        float sum = 0.0f;
        for (int64_t j = 0; j < dim; ++j) sum += g[j] * g[j];
        a[0] += sum / static_cast<float>(dim);
        const float denominator = std::sqrt(a[0]) + eps;
        for (int64_t j = 0; j < dim; ++j) w[j] -= lr * g[j] / denominator;
      }
      table->MarkDirty(ids[i]);
    }
  }

 private:
  std::string optimizer_;
  float epsilon_;
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableApply").Device(DEVICE_CPU), ApplyOp);

REGISTER_OP("EtjDiskTableExport")
    .Input("handle: resource")
    .Input("first: int64")
    .Input("count: int64")
    .Output("weights: float")
    .Output("slots: float")
    .Attr("dim: int >= 1")
    .Attr("slot_width: int >= 0")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      int64_t dim, width;
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
      TF_RETURN_IF_ERROR(c->GetAttr("slot_width", &width));
      c->set_output(0, c->Matrix(c->UnknownDim(), dim));
      c->set_output(1, c->Matrix(c->UnknownDim(), width));
      return Status();
    });

// [first, first + count) within the table's rows, or an error.
static Status CheckRange(const DiskTable& table, int64_t first, int64_t count) {
  if (first < 0 || count < 0 || first + count > table.rows()) {
    return errors::InvalidArgument("rows [", first, ", ", first + count,
                                   ") are not within the table's [0, ", table.rows(), ")");
  }
  return Status();
}

class ExportOp : public OpKernel {
 public:
  explicit ExportOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    const int64_t first = ctx->input(1).scalar<int64_t>()();
    const int64_t count = ctx->input(2).scalar<int64_t>()();
    OP_REQUIRES_OK(ctx, CheckRange(*table, first, count));
    const int64_t dim = table->dim(), width = table->slot_width(), record = dim + width;
    Tensor *weights = nullptr, *slots = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count, dim}), &weights));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({count, width}), &slots));
    // One piece's records at a time: the piece, never the shard, is in RAM.
    std::vector<float> records(count * record);
    {
      tensorflow::mutex_lock lock(*table->mu());
      OP_REQUIRES_OK(ctx, table->Export(first, count, records.data()));
    }
    float* w = weights->flat<float>().data();
    float* s = slots->flat<float>().data();
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(w + r * dim, &records[r * record], dim * sizeof(float));
      std::memcpy(s + r * width, &records[r * record + dim], width * sizeof(float));
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableExport").Device(DEVICE_CPU), ExportOp);

REGISTER_OP("EtjDiskTableImport")
    .Input("handle: resource")
    .Input("first: int64")
    .Input("weights: float")
    .Input("slots: float")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

class ImportOp : public OpKernel {
 public:
  explicit ImportOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    const int64_t first = ctx->input(1).scalar<int64_t>()();
    const Tensor& weights = ctx->input(2);
    const Tensor& slots = ctx->input(3);
    const int64_t dim = table->dim(), width = table->slot_width(), record = dim + width;
    OP_REQUIRES(ctx, weights.dims() == 2 && weights.dim_size(1) == dim,
                errors::InvalidArgument("weights must be [rows, ", dim, "], not ",
                                        weights.shape().DebugString()));
    const int64_t count = weights.dim_size(0);
    OP_REQUIRES(ctx,
                slots.dims() == 2 && slots.dim_size(0) == count && slots.dim_size(1) == width,
                errors::InvalidArgument("slots must be [", count, ", ", width, "], not ",
                                        slots.shape().DebugString()));
    OP_REQUIRES_OK(ctx, CheckRange(*table, first, count));
    std::vector<float> records(count * record);
    const float* w = weights.flat<float>().data();
    const float* s = slots.flat<float>().data();
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(&records[r * record], w + r * dim, dim * sizeof(float));
      std::memcpy(&records[r * record + dim], s + r * width, width * sizeof(float));
    }
    tensorflow::mutex_lock lock(*table->mu());
    OP_REQUIRES_OK(ctx, table->Import(first, count, records.data()));
  }
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableImport").Device(DEVICE_CPU), ImportOp);

REGISTER_OP("EtjDiskTableStats")
    .Input("handle: resource")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(kStats));
      return Status();
    });

class StatsOp : public OpKernel {
 public:
  explicit StatsOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kStats}), &out));
    tensorflow::mutex_lock lock(*table->mu());
    table->Stats(out->flat<int64_t>().data());
  }
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableStats").Device(DEVICE_CPU), StatsOp);

REGISTER_OP("EtjDiskTableSave")
    .Input("handle: resource")
    .Input("prefix: string")
    .Input("key: string")
    .Input("full_shape: int64")
    .Input("offset: int64")
    .Attr("slot: bool")
    .Attr("piece_rows: int >= 1")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);

// Writes the weights (or, `slot`, the slot rows) of the whole shard as a tensor bundle at
// `prefix`: slices of the tensor `key` of shape `full_shape` ([rows, width], or [rows]
// for a slot of one float a row), the shard's rows starting at row `offset` of it, one
// slice per `piece_rows` rows. The bundle merges into a checkpoint (MergeV2Checkpoints)
// beside the other shards' slices, as a partitioned variable's do.
class SaveOp : public OpKernel {
 public:
  explicit SaveOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("slot", &slot_));
    OP_REQUIRES_OK(c, c->GetAttr("piece_rows", &piece_rows_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DiskTable> table;
    OP_REQUIRES_OK(ctx, Table(ctx, &table));
    const std::string prefix = ctx->input(1).scalar<tstring>()();
    const std::string key = ctx->input(2).scalar<tstring>()();
    const auto dims = ctx->input(3).flat<int64_t>();
    const int64_t offset = ctx->input(4).scalar<int64_t>()();
    const int64_t dim = table->dim(), width = table->slot_width(), record = dim + width;
    const int64_t part = slot_ ? width : dim, rows = table->rows();
    OP_REQUIRES(ctx, part > 0, errors::InvalidArgument("the table keeps no slot rows"));
    TensorShape full;
    for (int i = 0; i < dims.size(); ++i) full.AddDim(dims(i));
    const bool flat = full.dims() == 1;
    OP_REQUIRES(ctx,
                (flat ? part == 1 : full.dims() == 2 && full.dim_size(1) == part) &&
                    offset >= 0 && offset + rows <= full.dim_size(0),
                errors::InvalidArgument("the shard's ", rows, " rows of width ", part,
                                        " at row ", offset, " do not fit ",
                                        full.DebugString()));
    tensorflow::BundleWriter writer(tensorflow::Env::Default(), prefix);
    OP_REQUIRES_OK(ctx, writer.status());
    std::vector<float> records;
    for (int64_t first = 0; first < rows; first += piece_rows_) {
      const int64_t count = std::min(piece_rows_, rows - first);
      records.resize(count * record);
      {
        // Per piece: training (another step's ops) may go on between two pieces, as it may
        // between two variables of one SaveV2.
        tensorflow::mutex_lock lock(*table->mu());
        OP_REQUIRES_OK(ctx, table->Export(first, count, records.data()));
      }
      Tensor piece(tensorflow::DT_FLOAT, flat ? TensorShape({count}) : TensorShape({count, part}));
      float* out = piece.flat<float>().data();
      const int64_t from = slot_ ? dim : 0;
      for (int64_t r = 0; r < count; ++r) {
        std::memcpy(out + r * part, &records[r * record + from], part * sizeof(float));
      }
      tensorflow::TensorSlice slice(full.dims());
      slice.set_start(0, offset + first);
      slice.set_length(0, count);
      if (count == full.dim_size(0)) {
        OP_REQUIRES_OK(ctx, writer.Add(key, piece));
      } else {
        OP_REQUIRES_OK(ctx, writer.AddSlice(key, full, slice, piece));
      }
    }
    OP_REQUIRES_OK(ctx, writer.Finish());
  }

 private:
  bool slot_;
  int64_t piece_rows_;
};

REGISTER_KERNEL_BUILDER(Name("EtjDiskTableSave").Device(DEVICE_CPU), SaveOp);

}  // namespace etj
