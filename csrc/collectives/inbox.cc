#include "collectives/inbox.h"

namespace pycollect {

void HeaderInbox::receive(Link& l, HeaderRecv& r) {
  Slot& s = slots_[l.peer()];
  if (s.header) {
    r.ticket = s.ticket;
    r.early = std::move(s.header);
    s = Slot{};
    return;
  }
  r.early.reset();
  r.ticket = l.postRecv(&r.own, sizeof(WireHeader));
}

void HeaderInbox::prefetch(Link& l) {
  Slot& s = slots_[l.peer()];
  if (s.header) return;
  s.header = std::make_shared<WireHeader>();
  s.ticket = l.postRecv(s.header.get(), sizeof(WireHeader));
}

const WireHeader* HeaderInbox::arrived(Link& l) const {
  const Slot& s = slots_[l.peer()];
  return s.header && l.received(s.ticket) ? s.header.get() : nullptr;
}

void HeaderInbox::clear() {
  for (Slot& s : slots_) s = Slot{};
}

}  // namespace pycollect
