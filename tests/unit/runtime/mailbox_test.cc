// The receive side of one thread: selector matching, non-overtaking takes,
// Peek, Leave, the futex wait, and waking a receiver asleep as the poller.
#include "runtime/mailbox.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "mailbox_messages.h"
#include "runtime/epoll_reactor.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kReceiver = Gid::Thread(1, 9, 1);
constexpr Gid kT = Gid::Thread(1, 2, 3);            // the exact sender
constexpr Gid kSameProcess = Gid::Thread(1, 2, 4);  // another thread of its process
constexpr Gid kSameHost = Gid::Thread(1, 5, 3);     // another process of its host
constexpr Gid kOtherHost = Gid::Thread(2, 2, 3);    // same indexes, other host

struct Messages : MailboxMessages {
  Messages() : MailboxMessages(kReceiver, size_t{4} << 20) {}
};

TEST_CASE("a selector matches by source (any, thread, process or host) and tag", "[mailbox]") {
  struct Row {
    Gid selector_source;
    Tag selector_tag;
    Gid from;
    Tag tag;
    bool matches;
  };
  const Gid any;
  const Gid process = kT.process();
  const Gid host = kT.host();
  const std::vector<Row> rows = {
      // any source
      {any, kAnyTag, kT, 7, true},
      {any, kAnyTag, kOtherHost, 0, true},
      {any, 7, kT, 7, true},
      {any, 7, kT, 8, false},
      // a thread: only that thread
      {kT, kAnyTag, kT, 7, true},
      {kT, 7, kT, 7, true},
      {kT, 7, kT, 8, false},
      {kT, kAnyTag, kSameProcess, 7, false},
      {kT, kAnyTag, kSameHost, 7, false},
      {kT, kAnyTag, kOtherHost, 7, false},
      // a process: any of its threads
      {process, kAnyTag, kT, 7, true},
      {process, kAnyTag, kSameProcess, 7, true},
      {process, 7, kSameProcess, 7, true},
      {process, 7, kSameProcess, 8, false},
      {process, kAnyTag, kSameHost, 7, false},
      {process, kAnyTag, kOtherHost, 7, false},
      // a host: any thread of any of its processes
      {host, kAnyTag, kT, 7, true},
      {host, kAnyTag, kSameProcess, 7, true},
      {host, kAnyTag, kSameHost, 7, true},
      {host, 7, kSameHost, 8, false},
      {host, kAnyTag, kOtherHost, 7, false},
  };
  for (const Row& row : rows) {
    INFO("selector " << row.selector_source.ToString() << " tag " << row.selector_tag
                     << ", message from " << row.from.ToString() << " tag " << row.tag);
    Selector selector{row.selector_source, row.selector_tag};
    CHECK(selector.Matches(row.from, row.tag, 0) == row.matches);
  }
  // Tag 0 is a tag like any other.
  CHECK(Selector{any, 0}.Matches(kT, 0, 0));
  CHECK_FALSE(Selector{any, 0}.Matches(kT, 1, 0));
}

TEST_CASE("Take returns the first matching message in arrival order", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  CHECK(mailbox.gid() == kReceiver);
  std::vector<detail::BufferSlot*> sent = {
      m.Make(kT, 1), m.Make(kSameHost, 2), m.Make(kT, 2), m.Make(kSameProcess, 1), m.Make(kT, 1),
  };
  for (auto* slot : sent) REQUIRE(mailbox.Deliver(slot));

  // Two messages from kT with tag 1: the earlier one first (non-overtaking).
  CHECK(mailbox.Take(Selector{kT, 1}) == sent[0]);
  CHECK(mailbox.Take(Selector{kT, 1}) == sent[4]);
  CHECK(mailbox.Take(Selector{kT, 1}) == nullptr);
  // From the process h1.p2: kT's tag-2 message came before kSameProcess's.
  CHECK(mailbox.Take(Selector{kT.process(), kAnyTag}) == sent[2]);
  CHECK(mailbox.Take(Selector{Gid(), kAnyTag}) == sent[1]);
  CHECK(mailbox.Take(Selector{Gid(), kAnyTag}) == sent[3]);
  CHECK(mailbox.Take(Selector{Gid(), kAnyTag}) == nullptr);
  for (auto* slot : sent) m.pool.Unref(slot);
  CHECK(m.InUse() == 0);
}

TEST_CASE("messages from one sender are taken in the order they were delivered", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  std::vector<detail::BufferSlot*> sent;
  for (uint32_t i = 0; i < 100; ++i) {
    sent.push_back(m.Make(i % 2 == 0 ? kT : kSameHost, 5, i));
    REQUIRE(mailbox.Deliver(sent.back()));
  }
  for (uint32_t i = 0; i < 100; i += 2) {
    detail::BufferSlot* slot = mailbox.Take(Selector{kT, 5});
    REQUIRE(slot == sent[i]);
    m.pool.Unref(slot);
  }
  for (uint32_t i = 1; i < 100; i += 2) {
    detail::BufferSlot* slot = mailbox.Take(Selector{Gid(), kAnyTag});
    REQUIRE(slot == sent[i]);
    m.pool.Unref(slot);
  }
}

TEST_CASE("Peek describes the first match and leaves it in place", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  MessageInfo info;
  CHECK_FALSE(mailbox.Peek(Selector{}, info));
  detail::BufferSlot* first = m.Make(kSameHost, 3, 11);
  detail::BufferSlot* second = m.Make(kT, 4, 22);
  REQUIRE(mailbox.Deliver(first));
  REQUIRE(mailbox.Deliver(second));

  REQUIRE(mailbox.Peek(Selector{kT, kAnyTag}, info));
  CHECK(info.source == kT);
  CHECK(info.tag == 4);
  CHECK(info.size == 22);
  REQUIRE(mailbox.Peek(Selector{kT, kAnyTag}, info));  // still there
  CHECK(info.size == 22);
  CHECK_FALSE(mailbox.Peek(Selector{kT, 3}, info));

  REQUIRE(mailbox.Peek(Selector{}, info));
  CHECK(info.source == kSameHost);
  CHECK(info.size == 11);

  CHECK(mailbox.Take(Selector{kT, kAnyTag}) == second);
  CHECK(mailbox.Take(Selector{}) == first);
  m.pool.Unref(first);
  m.pool.Unref(second);
}

TEST_CASE("Leave drops waiting messages and refuses later deliveries", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  REQUIRE(mailbox.Deliver(m.Make(kT, 1)));
  REQUIRE(mailbox.Deliver(m.Make(kT, 2)));
  CHECK(m.InUse() == 2);
  CHECK_FALSE(mailbox.left());

  CHECK(mailbox.Leave() == 2);
  CHECK(mailbox.left());
  CHECK(m.InUse() == 0);  // the dropped messages went back to the pool
  CHECK(mailbox.Take(Selector{}) == nullptr);

  detail::BufferSlot* late = m.Make(kT, 3);
  CHECK_FALSE(mailbox.Deliver(late));
  CHECK(late->refs.load() == 1);  // untouched: still the caller's
  CHECK(m.InUse() == 1);
  m.pool.Unref(late);
  CHECK(mailbox.Leave() == 0);
}

TEST_CASE("a mailbox destroyed with messages in it gives them back to the pool", "[mailbox]") {
  Messages m;
  {
    Mailbox mailbox(kReceiver);
    REQUIRE(mailbox.Deliver(m.Make(kT, 1)));
    REQUIRE(mailbox.Deliver(m.Make(kT, 2)));
  }
  CHECK(m.InUse() == 0);
}

TEST_CASE("Wait wakes when another thread delivers", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  detail::BufferSlot* message = m.Make(kT, 9);
  const auto deadline = Clock::now() + 30s;

  const uint32_t seen = mailbox.signal();
  std::atomic<bool> delivered{false};
  std::thread sender([&] { delivered.store(mailbox.Deliver(message)); });
  detail::BufferSlot* got = nullptr;
  uint32_t last = seen;
  while (Clock::now() < deadline) {
    mailbox.Wait(last, deadline);
    got = mailbox.Take(Selector{kT, 9});
    if (got != nullptr) break;
    last = mailbox.signal();  // woken for nothing (EINTR): wait again
  }
  sender.join();
  CHECK(delivered.load());
  REQUIRE(got == message);
  CHECK(Clock::now() < deadline);
  CHECK(mailbox.signal() != seen);
  m.pool.Unref(got);
}

TEST_CASE("Wait with no deadline (a blocking receive) wakes on a delivery", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  detail::BufferSlot* message = m.Make(kT, 9);
  const uint32_t seen = mailbox.signal();
  std::atomic<bool> delivered{false};
  std::thread sender([&] { delivered.store(mailbox.Deliver(message)); });
  while (mailbox.signal() == seen) mailbox.Wait(seen, Clock::time_point::max());
  sender.join();
  CHECK(delivered.load());
  CHECK(mailbox.Take(Selector{}) == message);
  m.pool.Unref(message);
}

TEST_CASE("Wait returns at its deadline when nothing is delivered", "[mailbox]") {
  Mailbox mailbox(kReceiver);
  const uint32_t seen = mailbox.signal();
  const auto deadline = Clock::now() + 50ms;
  while (Clock::now() < deadline) mailbox.Wait(seen, deadline);
  CHECK(Clock::now() >= deadline);
  CHECK(mailbox.signal() == seen);

  // A deadline in the past returns at once.
  const auto start = Clock::now();
  mailbox.Wait(seen, start - 1s);
  CHECK(Clock::now() - start < 5s);
}

TEST_CASE("Wait returns at once when a delivery came after the signal was read", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  const uint32_t seen = mailbox.signal();
  REQUIRE(mailbox.Deliver(m.Make(kT, 1)));
  const auto deadline = Clock::now() + 30s;
  mailbox.Wait(seen, deadline);  // no sleep: the signal moved on
  CHECK(Clock::now() < deadline);
}

TEST_CASE("Wake and Leave wake a waiting receiver from another thread", "[mailbox]") {
  Mailbox mailbox(kReceiver);
  for (bool leave : {false, true}) {
    INFO((leave ? "Leave" : "Wake"));
    const uint32_t seen = mailbox.signal();
    const auto deadline = Clock::now() + 30s;
    std::thread other([&] {
      if (leave) {
        mailbox.Leave();
      } else {
        mailbox.Wake();
      }
    });
    while (mailbox.signal() == seen && Clock::now() < deadline) mailbox.Wait(seen, deadline);
    other.join();
    CHECK(mailbox.signal() != seen);
    CHECK(Clock::now() < deadline);
  }
  CHECK(mailbox.left());
}

// A receiver that holds the poll token sleeps in the reactor, not on its
// mailbox (ProgressEngine::Sleep): the real epoll reactor here.
TEST_CASE("a delivery from another thread wakes a receiver asleep in the reactor as the poller",
          "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  auto reactor = EpollReactor::Create();
  REQUIRE(reactor.ok());
  detail::BufferSlot* message = m.Make(kT, 9);

  mailbox.SetPollerAsleep(reactor->get());
  const uint32_t seen = mailbox.signal();
  std::atomic<bool> looked{false};
  std::atomic<bool> delivered{false};
  // Delivers after the poller's last look at its mailbox, before or while
  // it sleeps in epoll.
  std::thread sender([&] {
    while (!looked.load()) std::this_thread::yield();
    delivered.store(mailbox.Deliver(message));
  });
  REQUIRE(mailbox.signal() == seen);
  looked.store(true);
  // Woken through the reactor's eventfd: 1 ready fd (0: it slept to the
  // timeout).
  const int ready = (*reactor)->Wait(30'000);
  sender.join();
  mailbox.SetPollerAsleep(nullptr);
  CHECK(delivered.load());
  CHECK(ready == 1);
  CHECK(mailbox.Take(Selector{}) == message);
  m.pool.Unref(message);
}

TEST_CASE("the poller's own deliveries and deliveries after its sleep leave the reactor alone",
          "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  auto reactor = EpollReactor::Create();
  REQUIRE(reactor.ok());

  // A network handler run by the sleeping poller delivers to its own
  // mailbox: it is awake, no wake-up is written.
  mailbox.SetPollerAsleep(reactor->get());
  REQUIRE(mailbox.Deliver(m.Make(kT, 1)));
  CHECK((*reactor)->Wait(0) == 0);
  mailbox.SetPollerAsleep(nullptr);

  // Not asleep as the poller: another thread's delivery wakes only the
  // mailbox.
  detail::BufferSlot* second = m.Make(kT, 2);
  std::atomic<bool> delivered{false};
  std::thread sender([&] { delivered.store(mailbox.Deliver(second)); });
  sender.join();
  CHECK(delivered.load());
  CHECK((*reactor)->Wait(0) == 0);
  for (Tag tag : {1u, 2u}) {
    detail::BufferSlot* slot = mailbox.Take(Selector{kT, tag});
    REQUIRE(slot != nullptr);
    m.pool.Unref(slot);
  }
}

TEST_CASE("a receiver thread waiting for many deliveries gets them all in order", "[mailbox]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  constexpr uint32_t kCount = 200;
  std::vector<detail::BufferSlot*> messages;
  for (uint32_t i = 0; i < kCount; ++i) messages.push_back(m.Make(kT, 1, i));
  std::atomic<uint32_t> refused{0};
  std::thread sender([&] {
    for (auto* slot : messages) {
      if (!mailbox.Deliver(slot)) refused.fetch_add(1);
    }
  });
  const auto deadline = Clock::now() + 30s;
  uint32_t next = 0;
  while (next < kCount && Clock::now() < deadline) {
    const uint32_t seen = mailbox.signal();
    while (detail::BufferSlot* slot = mailbox.Take(Selector{kT, 1})) {
      CHECK(slot->header().length == next);
      ++next;
      m.pool.Unref(slot);
    }
    if (next < kCount) mailbox.Wait(seen, deadline);
  }
  sender.join();
  CHECK(refused.load() == 0);
  CHECK(next == kCount);
}

TEST_CASE("the thread table finds the mailboxes inserted, across chunks", "[mailbox]") {
  ThreadTable table;
  CHECK(table.Find(1) == nullptr);
  CHECK(table.Find(Gid::kMaxThread) == nullptr);
  const std::vector<uint32_t> indexes = {1, 4095, 4096, 123456, Gid::kMaxThread};
  for (uint32_t index : indexes) {
    table.Insert(index, std::make_unique<Mailbox>(Gid::Thread(1, 2, index)));
  }
  for (uint32_t index : indexes) {
    INFO("index " << index);
    Mailbox* mailbox = table.Find(index);
    REQUIRE(mailbox != nullptr);
    CHECK(mailbox->gid() == Gid::Thread(1, 2, index));
  }
  CHECK(table.Find(2) == nullptr);
  CHECK(table.Find(4097) == nullptr);
  std::vector<uint32_t> visited;
  table.ForEach([&](Mailbox& mailbox) { visited.push_back(mailbox.gid().thread_index()); });
  CHECK(visited == indexes);
}

}  // namespace
}  // namespace tocl::runtime
