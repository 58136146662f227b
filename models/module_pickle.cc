#include "models/module_pickle.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/one_line.h"

namespace kvlearn {
namespace {

// Memo indices above this are refused: kvlearn's files use a few dozen.
constexpr uint64_t kMaxMemoIndex = 1 << 20;
// A module's state is a dict of tensors whose arguments nest three deep;
// deeper objects are refused (they would only make destruction recurse).
constexpr int kMaxNesting = 16;
// Dimensions of a tensor (kvlearn's have one or two).
constexpr size_t kMaxDims = 8;
// Objects pushed in all: bounds the memory a hostile pickle can make the
// reader allocate (one object per opcode); kvlearn's push about 150.
constexpr size_t kMaxPushes = size_t{1} << 17;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// One pickled object. Dicts, lists and modules are the only objects changed
// after they are built (SETITEMS, APPENDS, BUILD), so they are the only ones
// that could be made to hold themselves; `holds_container` keeps them from
// ever holding one another, which rules such cycles out.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kModule
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  std::string text, name;       // string; global's module and name; storage key
  std::vector<ValuePtr> items;  // tuple and list items; dict keys and values alternating
  PickledTensor tensor;         // kStorage: key and dtype; kTensor: all of it
  ValuePtr state;               // kModule: set by BUILD
  int nesting = 1;
  bool holds_container = false;  // a dict or list somewhere inside

  // A module counts too: its state is a dict.
  bool IsContainer() const {
    return kind == Kind::kDict || kind == Kind::kList || kind == Kind::kModule;
  }
};

ValuePtr Make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

uint64_t LittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

bool IsString(const ValuePtr& v, std::string_view text) {
  return v->kind == Value::Kind::kString && v->text == text;
}

bool IsGlobal(const ValuePtr& v, std::string_view module, std::string_view name) {
  return v->kind == Value::Kind::kGlobal && v->text == module && v->name == name;
}

// A tuple of small non-negative integers (a tensor's sizes or strides).
bool ReadDims(const ValuePtr& v, std::vector<int64_t>* out) {
  if (v->kind != Value::Kind::kTuple || v->items.size() > kMaxDims) return false;
  for (const ValuePtr& d : v->items) {
    if (d->kind != Value::Kind::kInt || d->integer < 0) return false;
    out->push_back(d->integer);
  }
  return true;
}

class Evaluator {
 public:
  Evaluator(std::string_view pickle, std::string_view class_name)
      : in_(pickle), class_name_(class_name) {}

  // The Python module of the class built ("__torch__.mymodels"), once built.
  const std::string& class_module() const { return class_module_; }

  absl::StatusOr<ValuePtr> Run() {
    while (at_ < in_.size()) {
      offset_ = at_;
      op_ = static_cast<unsigned char>(in_[at_++]);
      if (op_ == '.') {  // STOP
        if (stack_.size() != 1 || !marks_.empty()) return Fail("the stack is not one object");
        if (at_ != in_.size()) return Fail("bytes after STOP");
        return stack_.back();
      }
      if (absl::Status s = Step(); !s.ok()) return s;
    }
    return absl::InvalidArgumentError("pickle: no STOP");
  }

 private:
  absl::Status Fail(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("pickle byte ", offset_, " (opcode 0x",
                                                   absl::Hex(op_), "): ", std::string(what)));
  }

  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t Above() const { return stack_.size() - Floor(); }  // objects above the top MARK

  ValuePtr Pop() {
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }

  absl::Status Push(ValuePtr v) {
    if (v->nesting > kMaxNesting) return Fail("objects nested too deep");
    if (++pushes_ > kMaxPushes) return Fail(absl::StrCat("more than ", kMaxPushes, " objects"));
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  // Reads `n` bytes of argument.
  bool Take(size_t n, std::string_view* out) {
    if (in_.size() - at_ < n) return false;
    *out = in_.substr(at_, n);
    at_ += n;
    return true;
  }

  bool TakeInt(int bytes, uint64_t* out) {
    std::string_view b;
    if (!Take(bytes, &b)) return false;
    *out = LittleEndian(b.data(), bytes);
    return true;
  }

  // A tuple of `items` (moved in).
  ValuePtr Tuple(std::vector<ValuePtr> items) {
    ValuePtr t = Make(Value::Kind::kTuple);
    for (const ValuePtr& v : items) {
      t->nesting = std::max(t->nesting, v->nesting + 1);
      t->holds_container = t->holds_container || v->IsContainer() || v->holds_container;
    }
    t->items = std::move(items);
    return t;
  }

  // Adds the objects above the top MARK (or the top `n` when no MARK is
  // used) to the dict or list below them.
  absl::Status AddItems(bool from_mark, size_t n) {
    if (from_mark) {
      if (marks_.empty()) return Fail("no MARK");
      n = Above();
    } else if (Above() < n) {
      return Fail("pops more than the stack holds");
    }
    const size_t first = stack_.size() - n;
    if (first == 0) return Fail("nothing below the items");
    if (from_mark) marks_.pop_back();
    if (!marks_.empty() && first - 1 < marks_.back()) return Fail("the target is below a MARK");
    const ValuePtr& target = stack_[first - 1];
    const bool dict = target->kind == Value::Kind::kDict;
    if (!dict && target->kind != Value::Kind::kList) return Fail("adds items to a non-container");
    if (dict && n % 2 != 0) return Fail("an odd count of keys and values");
    for (size_t i = first; i < stack_.size(); ++i) {
      const ValuePtr& v = stack_[i];
      if (v->IsContainer() || v->holds_container)
        return Fail("a dict, list or module inside another");
      target->nesting = std::max(target->nesting, v->nesting + 1);
      if (target->nesting > kMaxNesting) return Fail("objects nested too deep");
      target->items.push_back(v);
    }
    stack_.resize(first);
    return absl::OkStatus();
  }

  // BINPERSID's ('storage', torch.<Type>Storage, key, location, numel).
  absl::StatusOr<ValuePtr> PersistentStorage(const ValuePtr& pid) {
    const auto& it = pid->items;
    if (pid->kind != Value::Kind::kTuple || it.size() != 5 || !IsString(it[0], "storage") ||
        it[1]->kind != Value::Kind::kGlobal || it[1]->text != "torch" ||
        it[2]->kind != Value::Kind::kString || it[3]->kind != Value::Kind::kString) {
      return Fail("a persistent id that is not a storage");
    }
    ValuePtr s = Make(Value::Kind::kStorage);
    if (it[1]->name == "FloatStorage") {
      s->tensor.dtype = PickledDtype::kFloat32;
    } else if (it[1]->name == "DoubleStorage") {
      s->tensor.dtype = PickledDtype::kFloat64;
    } else {
      return Fail(
          absl::StrCat("a storage of torch.", OneLine(it[1]->name), " (not float or double)"));
    }
    s->tensor.storage_key = it[2]->text;
    return s;
  }

  // REDUCE: the two callables a module's state uses.
  absl::StatusOr<ValuePtr> Call(const ValuePtr& callable, const ValuePtr& args) {
    if (args->kind != Value::Kind::kTuple) return Fail("arguments that are not a tuple");
    const auto& a = args->items;
    if (IsGlobal(callable, "collections", "OrderedDict")) {
      if (!a.empty()) return Fail("OrderedDict with arguments");
      return Make(Value::Kind::kDict);
    }
    if (IsGlobal(callable, "torch._utils", "_rebuild_tensor_v2")) {
      // (storage, storage_offset, sizes, strides, requires_grad, hooks[, metadata])
      if (a.size() < 6 || a.size() > 7 || a[0]->kind != Value::Kind::kStorage ||
          a[1]->kind != Value::Kind::kInt || a[1]->integer < 0) {
        return Fail("_rebuild_tensor_v2 with other arguments than a tensor's");
      }
      ValuePtr t = Make(Value::Kind::kTensor);
      t->tensor = a[0]->tensor;
      t->tensor.storage_offset = a[1]->integer;
      if (!ReadDims(a[2], &t->tensor.sizes) || !ReadDims(a[3], &t->tensor.strides) ||
          t->tensor.sizes.size() != t->tensor.strides.size()) {
        return Fail("a tensor's sizes and strides are not tuples of one length");
      }
      return t;
    }
    if (callable->kind == Value::Kind::kGlobal) {
      return Fail(absl::StrCat("calls ", OneLine(callable->text), ".", OneLine(callable->name)));
    }
    return Fail("calls an object that is not a global");
  }

  absl::Status Step() {
    switch (op_) {
      case 0x80: {  // PROTO
        std::string_view v;
        if (!Take(1, &v)) return Fail("truncated");
        return absl::OkStatus();
      }
      case 'c': {  // GLOBAL: module\nname\n
        ValuePtr g = Make(Value::Kind::kGlobal);
        for (std::string* line : {&g->text, &g->name}) {
          const void* nl = std::memchr(in_.data() + at_, '\n', in_.size() - at_);
          if (nl == nullptr) return Fail("truncated");
          const size_t end = static_cast<const char*>(nl) - in_.data();
          line->assign(in_.substr(at_, end - at_));
          at_ = end + 1;
        }
        return Push(std::move(g));
      }
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case ')':  // EMPTY_TUPLE
        return Push(Make(Value::Kind::kTuple));
      case '}':  // EMPTY_DICT
        return Push(Make(Value::Kind::kDict));
      case ']':  // EMPTY_LIST
        return Push(Make(Value::Kind::kList));
      case 'N':  // NONE
        return Push(Make(Value::Kind::kNone));
      case 0x88:    // NEWTRUE
      case 0x89: {  // NEWFALSE
        ValuePtr b = Make(Value::Kind::kBool);
        b->integer = op_ == 0x88;
        return Push(std::move(b));
      }
      case 't': {  // TUPLE
        if (marks_.empty()) return Fail("no MARK");
        std::vector<ValuePtr> items(stack_.begin() + Floor(), stack_.end());
        stack_.resize(Floor());
        marks_.pop_back();
        return Push(Tuple(std::move(items)));
      }
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const size_t n = op_ - 0x84;
        if (Above() < n) return Fail("pops more than the stack holds");
        std::vector<ValuePtr> items(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        return Push(Tuple(std::move(items)));
      }
      case 'u':  // SETITEMS
      case 'e':  // APPENDS
        return AddItems(/*from_mark=*/true, 0);
      case 's':  // SETITEM
        return AddItems(/*from_mark=*/false, 2);
      case 'a':  // APPEND
        return AddItems(/*from_mark=*/false, 1);
      case 'q':    // BINPUT
      case 'r': {  // LONG_BINPUT
        uint64_t index = 0;
        if (!TakeInt(op_ == 'q' ? 1 : 4, &index)) return Fail("truncated");
        if (Above() < 1) return Fail("nothing to memoize");
        if (index > kMaxMemoIndex) return Fail("memo index too large");
        memo_[index] = stack_.back();
        return absl::OkStatus();
      }
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        uint64_t index = 0;
        if (!TakeInt(op_ == 'h' ? 1 : 4, &index)) return Fail("truncated");
        const auto it = memo_.find(index);
        if (it == memo_.end()) return Fail("memo entry never stored");
        return Push(it->second);
      }
      case 'X':    // BINUNICODE
      case 'B':    // BINBYTES
      case 0x8c:   // SHORT_BINUNICODE
      case 'C': {  // SHORT_BINBYTES
        const int bytes = op_ == 'X' || op_ == 'B' ? 4 : 1;
        uint64_t n = 0;
        std::string_view text;
        if (!TakeInt(bytes, &n) || n > in_.size() - at_ || !Take(n, &text)) {
          return Fail("truncated, or a length past the input");
        }
        ValuePtr s = Make(Value::Kind::kString);
        s->text = std::string(text);
        return Push(std::move(s));
      }
      case 'K':    // BININT1
      case 'M':    // BININT2
      case 'J': {  // BININT (signed)
        const int bytes = op_ == 'K' ? 1 : op_ == 'M' ? 2 : 4;
        uint64_t n = 0;
        if (!TakeInt(bytes, &n)) return Fail("truncated");
        ValuePtr i = Make(Value::Kind::kInt);
        i->integer = op_ == 'J' ? static_cast<int32_t>(n) : static_cast<int64_t>(n);
        return Push(std::move(i));
      }
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        uint64_t n = 0;
        std::string_view b;
        if (!TakeInt(1, &n) || !Take(n, &b)) return Fail("truncated");
        if (n > 8) return Fail("an integer wider than 64 bits");
        ValuePtr i = Make(Value::Kind::kInt);
        uint64_t bits = n == 0 ? 0 : LittleEndian(b.data(), static_cast<int>(n));
        if (n > 0 && n < 8 && (bits >> (8 * n - 1)) != 0) bits |= ~uint64_t{0} << (8 * n);
        i->integer = static_cast<int64_t>(bits);
        return Push(std::move(i));
      }
      case 'G': {  // BINFLOAT (big-endian double; its value is never needed)
        std::string_view b;
        if (!Take(8, &b)) return Fail("truncated");
        return Push(Make(Value::Kind::kFloat));
      }
      case 'Q': {  // BINPERSID
        if (Above() < 1) return Fail("pops more than the stack holds");
        auto s = PersistentStorage(Pop());
        if (!s.ok()) return s.status();
        return Push(*std::move(s));
      }
      case 'R': {  // REDUCE
        if (Above() < 2) return Fail("pops more than the stack holds");
        ValuePtr args = Pop(), callable = Pop();
        auto v = Call(callable, args);
        if (!v.ok()) return v.status();
        return Push(*std::move(v));
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        if (Above() < 2) return Fail("pops more than the stack holds");
        ValuePtr args = Pop(), cls = Pop();
        // TorchScript names a class __torch__.<its Python module>.<name>;
        // one defined in the script that saves it is __torch__.<name>.
        const bool scripted = cls->kind == Value::Kind::kGlobal &&
                              (cls->text == "__torch__" || cls->text.rfind("__torch__.", 0) == 0);
        if (!scripted || cls->name != class_name_) {
          const std::string found = cls->kind == Value::Kind::kGlobal
                                        ? OneLine(absl::StrCat(cls->text, ".", cls->name))
                                        : std::string("(not a class)");
          return Fail(absl::StrCat("an object of class '", found, "', not a TorchScript class ",
                                   std::string(class_name_)));
        }
        if (!class_module_.empty() && class_module_ != cls->text) {
          return Fail("modules of two classes");
        }
        class_module_ = cls->text;
        if (args->kind != Value::Kind::kTuple || !args->items.empty()) {
          return Fail("a module built with arguments");
        }
        return Push(Make(Value::Kind::kModule));
      }
      case 'b': {  // BUILD: the module's state
        if (Above() < 2) return Fail("pops more than the stack holds");
        ValuePtr state = Pop();
        const ValuePtr& module = stack_.back();
        if (module->kind != Value::Kind::kModule || module->state != nullptr) {
          return Fail("BUILD of something other than a new module");
        }
        if (state->kind != Value::Kind::kDict) return Fail("a module state that is not a dict");
        module->state = std::move(state);
        return absl::OkStatus();
      }
      default:
        return Fail("unsupported opcode");
    }
  }

  std::string_view in_;
  std::string_view class_name_;
  std::string class_module_;
  size_t at_ = 0;
  size_t offset_ = 0;  // of the opcode being run
  unsigned char op_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // stack size at each open MARK
  std::unordered_map<uint64_t, ValuePtr> memo_;
  size_t pushes_ = 0;
};

}  // namespace

absl::StatusOr<ModuleState> ReadModulePickle(std::string_view pickle, std::string_view class_name) {
  Evaluator evaluator(pickle, class_name);
  auto result = evaluator.Run();
  if (!result.ok()) return result.status();
  const ValuePtr& module = *result;
  if (module->kind != Value::Kind::kModule || module->state == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle: no ", std::string(class_name), " module"));
  }
  ModuleState out;
  out.class_module = evaluator.class_module();
  const auto& items = module->state->items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind == Value::Kind::kString && items[i + 1]->kind == Value::Kind::kTensor) {
      out.tensors[items[i]->text] = items[i + 1]->tensor;
    }
  }
  return out;
}

}  // namespace kvlearn
