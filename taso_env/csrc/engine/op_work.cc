// FLOP and byte counts per op: the inputs of every cost model.
#include "taso/errors.h"
#include "taso/graph.h"

namespace taso {
namespace {

// Floating-point operations per output element of element-wise ops (transcendentals
// count as several): the operator table's column (taso/op_table.def), 0 for other ops.
double elementwise_flops(OpType type) { return op_schema(type).elementwise_flops; }

double activation_flops(int64_t act) {
  switch (act) {
    case kActRelu: return 1;
    case kActSigmoid:
    case kActTanh: return 8;
    default: return 0;
  }
}

}  // namespace

OpWork compute_op_work(const Op& op, const std::vector<TensorType>& in) {
  OpWork w;
  if (is_source_op(op.type)) return w;  // fed, not computed
  for (const TensorType& t : in) w.bytes_read += static_cast<double>(t.num_bytes());
  for (const TensorType& t : op.outputs) w.bytes_written += static_cast<double>(t.num_bytes());
  const double out_elems = static_cast<double>(op.outputs.empty() ? 0 : op.outputs[0].num_elements());
  switch (op.type) {
    case OpType::kConv2D: {
      const auto& wt = in[1].shape;  // [K, C/g, kh, kw]
      double macs_per_out = static_cast<double>(wt[1] * wt[2] * wt[3]);
      w.flops = out_elems * (2 * macs_per_out + (in.size() == 3 ? 1 : 0) +
                             activation_flops(op.attrs.get_int("activation")));
      break;
    }
    case OpType::kMatMul: {
      const auto& a = in[0].shape;
      double k = static_cast<double>(a.back());
      w.flops = out_elems * (2 * k + activation_flops(op.attrs.get_int("activation")));
      break;
    }
    case OpType::kGemm: {
      const auto& a = in[0].shape;
      double k = static_cast<double>(op.attrs.get_int("trans_a") ? a[0] : a[1]);
      w.flops = out_elems * (2 * k + (in.size() == 3 ? 2 : 0));
      break;
    }
    case OpType::kMaxPool2D:
    case OpType::kAvgPool2D: {
      const auto& k = op.attrs.get_ints("kernel");
      w.flops = out_elems * static_cast<double>(k[0] * k[1]);
      break;
    }
    case OpType::kGlobalAvgPool:
    case OpType::kReduceMean:
    case OpType::kReduceSum: w.flops = static_cast<double>(in[0].num_elements()); break;
    case OpType::kBatchNorm: w.flops = 2 * out_elems; break;
    case OpType::kSoftmax: w.flops = 12 * out_elems; break;
    case OpType::kLayerNorm: w.flops = 10 * out_elems; break;
    case OpType::kWhere: w.flops = out_elems; break;
    case OpType::kCumSum: w.flops = out_elems; break;  // one add per element
    case OpType::kEqual: w.flops = out_elems; break;   // one comparison per element
    case OpType::kOpaque: w.flops = out_elems; break;
    case OpType::kConcat:
    case OpType::kSplit:
    case OpType::kTranspose:
    case OpType::kReshape:
    case OpType::kFlatten:
    case OpType::kPad:
    case OpType::kGather:
    case OpType::kGatherElements:
    case OpType::kCast:
    case OpType::kConstant:
    case OpType::kIdentity:
    case OpType::kEnlarge:
      break;  // data movement: bytes only
    default: w.flops = out_elems * elementwise_flops(op.type); break;
  }
  if (op.type == OpType::kGather || op.type == OpType::kGatherElements) {
    // Gather (GatherElements) reads only the rows (elements) it selects, not the whole table.
    w.bytes_read = static_cast<double>(in[1].num_bytes()) + w.bytes_written;
  }
  return w;
}

}  // namespace taso
