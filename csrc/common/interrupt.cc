#include "common/interrupt.h"

namespace pycollect {
namespace interrupt {
namespace {

thread_local Check tCheck = nullptr;

}  // namespace

Scope::Scope(Check check) : saved_(tCheck) { tCheck = check; }
Scope::~Scope() { tCheck = saved_; }

bool installed() { return tCheck != nullptr; }
bool requested() { return tCheck != nullptr && tCheck(); }

}  // namespace interrupt
}  // namespace pycollect
