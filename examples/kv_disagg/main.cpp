// An engine-shaped disaggregated serving run: a scheduler (this process) starts a decode and a
// prefill worker (this program again, as two processes) and hands them request ids and block
// ids over pipes. Decode owns the KV pool and grants each request's blocks to prefill; prefill
// streams the layers into them. Decode aborts req-2 in the middle and gives its blocks to req-3
// at once, while req-2's prefill is stalled with layers still to write; at the end decode checks
// that every finished request's KV holds its own bytes and nothing else.
//
//   memwire-kv-disagg               grants: req-2's late writes are refused, exit 0 when intact
//   memwire-kv-disagg --no-grants   the pool's shared metadata: they land in req-3's blocks,
//                                   and the check reports the corruption (exit 3)
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <iostream>
#include <stdexcept>
#include <string>

#include "kv_disagg.hpp"
#include "workers.hpp"

namespace kv_disagg {
namespace {

constexpr int kExitCorrupt = 3;
constexpr std::int64_t kNever = -1;
constexpr std::int64_t kAbortAfterLayer = 3;  // decode aborts req-2 once its layer 3 is in

// A worker process and the two pipes the scheduler talks to it through.
class Worker {
 public:
  Worker(std::string role, std::vector<std::string> args) : role_(std::move(role)) {
    int to_worker[2], from_worker[2];
    if (::pipe2(to_worker, O_CLOEXEC) != 0 || ::pipe2(from_worker, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(to_worker[0], STDIN_FILENO);  // dup2 clears close-on-exec on these two
      ::dup2(from_worker[1], STDOUT_FILENO);
      args.insert(args.begin(), role_);
      args.insert(args.begin(), "memwire-kv-disagg");
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::perror("execv");
      ::_exit(127);
    }
    ::close(to_worker[0]);
    ::close(from_worker[1]);
    to_ = to_worker[1];
    from_fd_ = from_worker[0];
    from_ = LineReader(from_fd_);
  }
  ~Worker() { stop(); }

  void send(const std::string& line) {
    const std::string text = line + "\n";
    for (std::size_t done = 0; done < text.size();) {
      const auto wrote = ::write(to_, text.data() + done, text.size() - done);
      if (wrote <= 0) throw std::runtime_error(role_ + " is gone");
      done += static_cast<std::size_t>(wrote);
    }
  }

  // The next line that starts with one of `prefixes`; the others wait for their turn.
  std::string await(const std::vector<std::string>& prefixes) {
    const auto matches = [&](const std::string& line) {
      for (const auto& prefix : prefixes)
        if (line.starts_with(prefix)) return true;
      return false;
    };
    for (auto it = stash_.begin(); it != stash_.end(); ++it)
      if (matches(*it)) {
        auto line = *it;
        stash_.erase(it);
        return line;
      }
    while (auto line = from_.next()) {
      if (line->starts_with("failed ")) throw std::runtime_error(role_ + ": " + *line);
      if (matches(*line)) return *line;
      stash_.push_back(*line);
    }
    throw std::runtime_error(role_ + " exited before answering");
  }

  // Tells it to quit and waits for it to exit.
  void stop() {
    if (pid_ <= 0) return;
    if (to_ >= 0) {
      (void)::write(to_, "quit\n", 5);
      ::close(to_);
      to_ = -1;
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(from_fd_);
    pid_ = -1;
  }

 private:
  std::string role_;
  pid_t pid_ = -1;
  int to_ = -1, from_fd_ = -1;
  LineReader from_{-1};
  std::deque<std::string> stash_;
};

// A line's words, and the text after its first `skip` words (metadata, error messages).
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}
std::string rest_after(const std::string& line, std::size_t skip) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < skip && at != std::string::npos; ++i) {
    at = line.find(' ', at);
    if (at != std::string::npos) ++at;
  }
  return at == std::string::npos ? std::string() : line.substr(at);
}
std::string ms(const std::string& text, int decimals = 1) {
  char out[32];
  std::snprintf(out, sizeof out, "%.*f ms", decimals, std::stod(text));
  return out;
}

int schedule(bool grants) {
  Worker decode("decode",
                grants ? std::vector<std::string>{} : std::vector<std::string>{"--no-grants"});
  Worker prefill("prefill", {});
  const auto transports = words(decode.await({"ready "}))[1];
  const auto prefill_name = words(prefill.await({"ready "}))[1];
  std::cout << "kv_disagg: decode's KV pool: " << kPoolBlocks << " blocks of " << kBlockBytes / 1024
            << " KiB (" << kLayers << " layers x K,V x " << kSlots << " block ids), transports "
            << transports << "; "
            << (grants ? "a grant per request" : "--no-grants: the pool's shared metadata") << "\n";

  // Decode opens the request and answers with the metadata prefill writes it with.
  const auto admit = [&](const std::string& request, const std::vector<std::uint64_t>& ids,
                         std::int64_t abort_after, std::int64_t stall_after) {
    decode.send("admit " + request + " " + join_ids(ids) + " " + std::to_string(abort_after) + " " +
                prefill_name);
    const auto metadata = rest_after(decode.await({"admitted " + request + " "}), 2);
    prefill.send("prefill " + request + " " + join_ids(ids) + " " + std::to_string(stall_after) +
                 " " + metadata);
  };
  int corrupt = 0;  // requests whose KV held bytes not their own
  const auto outcome = [&](const std::string& request) {
    const auto line = decode.await(
        {"received " + request + " ", "aborted " + request + " ", "corrupt " + request + " "});
    const auto word = words(line);
    if (word[0] == "received") return "first layer " + ms(word[2]) + ", end to end " + ms(word[3]);
    if (word[0] == "aborted")
      return "aborted by decode after layer " + word[2] + " (abort took " + ms(word[3], 2) +
             "); its blocks go to the next request at once";
    ++corrupt;
    return "CORRUPT on arrival, " + rest_after(line, 2);
  };

  const std::vector<std::uint64_t> first_ids{0, 1, 2, 3}, second_ids{4, 5, 6, 7};
  admit("req-1", first_ids, kNever, kNever);
  // req-2's prefill stalls after the layer decode aborts at, then writes the rest late.
  admit("req-2", second_ids, kAbortAfterLayer, kAbortAfterLayer);
  const auto req2 = outcome("req-2");
  admit("req-3", second_ids, kNever, kNever);  // req-2's blocks, reused at once
  std::cout << "req-1 on blocks " << join_ids(first_ids) << ": " << outcome("req-1") << "\n"
            << "req-2 on blocks " << join_ids(second_ids) << ": " << req2 << "\n"
            << "req-3 on blocks " << join_ids(second_ids) << ": " << outcome("req-3") << "\n";

  for (const std::string request : {"req-1", "req-3", "req-2"}) {
    const auto line = prefill.await({"prefilled " + request + " "});
    const auto word = words(line);
    if (request != "req-2") continue;
    std::cout << "req-2's prefill resumed and sent its last " << word[3] << " layers: "
              << (word[4] == "ok" ? "they landed (nothing refuses the shared metadata)"
                                  : "refused: " + rest_after(line, 5))
              << "\n";
  }

  decode.send("verify");
  std::string report;
  for (;;) {
    const auto line = decode.await({"intact ", "corrupt ", "verified "});
    const auto word = words(line);
    if (word[0] == "verified") {
      corrupt += std::stoi(word[1]);
      break;
    }
    report += (report.empty() ? "" : "; ") + word[1] +
              (word[0] == "intact" ? " intact" : " CORRUPT, " + rest_after(line, 2));
  }
  std::cout << "decode's check of the finished requests' KV: " << report << "\n";
  prefill.stop();  // decode keeps its pool until prefill is gone
  decode.stop();
  if (corrupt == 0) {
    std::cout << "result: KV intact: no late byte of req-2 in req-3's blocks\n";
    return 0;
  }
  std::cout << "result: corruption detected"
            << (grants ? ""
                       : " (the expected outcome without grants: the aborted request's "
                         "late writes landed in blocks decode had reused)")
            << "\n";
  return kExitCorrupt;
}

}  // namespace
}  // namespace kv_disagg

int main(int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  const bool no_grants =
      (argc > 1 && first == "--no-grants") || (argc > 2 && std::string(argv[2]) == "--no-grants");
  try {
    if (first == "decode") return kv_disagg::run_decode(!no_grants);
    if (first == "prefill") return kv_disagg::run_prefill();
    if (first.empty() || first == "--no-grants") return kv_disagg::schedule(!no_grants);
  } catch (const std::exception& error) {
    std::cerr << "memwire-kv-disagg" << (first.empty() ? "" : " " + first) << ": " << error.what()
              << "\n";
    return 1;
  }
  std::cerr << "usage: memwire-kv-disagg [--no-grants]\n";
  return 2;
}
