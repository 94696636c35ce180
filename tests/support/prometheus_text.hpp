#pragma once

// A strict reader of Prometheus text exposition (format 0.0.4), for tests: every line must be a
// HELP, a TYPE or a sample of a family declared before it, and histograms must add up.

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace memwire::test_support {

struct PrometheusText {
  // "name{label=\"value\",...}" with labels sorted by name -> value.
  std::map<std::string, double> samples;
  std::vector<std::string> problems;  // empty when the text is valid

  double value(const std::string& key) const {
    auto found = samples.find(key);
    return found == samples.end() ? -1 : found->second;
  }
  // Sum over every sample of `name` whose labels include all of `labels`.
  double sum(const std::string& name, const std::map<std::string, std::string>& labels) const;
};

// "name{a=\"x\",b=\"y\"}" from a name and labels (sorted, as std::map keeps them).
inline std::string series(const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  if (labels.empty()) return name;
  std::string key = name + "{";
  bool first = true;
  for (const auto& [label, value] : labels) {
    key += (first ? "" : ",") + label + "=\"" + value + "\"";
    first = false;
  }
  return key + "}";
}

namespace detail_prometheus {

inline bool parse_value(const std::string& text, double& value) {
  if (text == "+Inf") return value = INFINITY, true;
  if (text == "-Inf") return value = -INFINITY, true;
  if (text == "NaN") return value = NAN, true;
  std::istringstream in(text);
  in >> value;
  return !in.fail() && in.eof();
}

// Parses `{a="x",b="y"}` starting at `text[at]`; false on any syntax error.
inline bool parse_labels(const std::string& text, std::size_t& at,
                         std::map<std::string, std::string>& labels) {
  static const std::regex label_name("[a-zA-Z_][a-zA-Z0-9_]*");
  if (text[at] != '{') return true;
  ++at;
  while (at < text.size() && text[at] != '}') {
    auto equals = text.find('=', at);
    if (equals == std::string::npos) return false;
    auto name = text.substr(at, equals - at);
    if (!std::regex_match(name, label_name) || labels.contains(name)) return false;
    at = equals + 1;
    if (at >= text.size() || text[at] != '"') return false;
    ++at;
    std::string value;
    for (;; ++at) {
      if (at >= text.size()) return false;
      char c = text[at];
      if (c == '"') break;
      if (c == '\\') {
        if (++at >= text.size()) return false;
        char escaped = text[at];
        if (escaped == 'n')
          value += '\n';
        else if (escaped == '\\' || escaped == '"')
          value += escaped;
        else
          return false;
      } else {
        value += c;
      }
    }
    ++at;  // closing quote
    labels[name] = value;
    if (at < text.size() && text[at] == ',') ++at;
  }
  if (at >= text.size()) return false;
  ++at;  // '}'
  return true;
}

}  // namespace detail_prometheus

inline PrometheusText parse_prometheus(const std::string& text) {
  using namespace detail_prometheus;
  static const std::regex metric_name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::set<std::string> types{"counter", "gauge", "histogram", "summary", "untyped"};
  PrometheusText parsed;
  std::map<std::string, std::string> family_type;
  std::set<std::string> helped;
  auto problem = [&](const std::string& line, const std::string& why) {
    parsed.problems.push_back(why + ": '" + line + "'");
  };
  auto family_of = [&](const std::string& name) -> std::string {
    if (family_type.contains(name)) return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string_view view = name;
      if (view.ends_with(suffix)) {
        auto base = name.substr(0, name.size() - std::string_view(suffix).size());
        auto type = family_type.find(base);
        if (type != family_type.end() &&
            (type->second == "histogram" || (type->second == "summary" && suffix[1] != 'b')))
          return base;
      }
    }
    return {};
  };
  // Histogram checks: buckets cumulative, +Inf == _count.
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // series -> (le, n)
  if (!text.empty() && text.back() != '\n') parsed.problems.push_back("no final newline");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.starts_with("#")) {
      std::istringstream words(line);
      std::string hash, keyword, name;
      words >> hash >> keyword >> name;
      if (hash != "#" || (keyword != "HELP" && keyword != "TYPE")) continue;  // a comment
      if (!std::regex_match(name, metric_name)) problem(line, "bad metric name");
      if (keyword == "HELP") {
        if (!helped.insert(name).second) problem(line, "second HELP");
      } else {
        std::string type, extra;
        words >> type;
        if (!types.contains(type) || (words >> extra)) problem(line, "bad TYPE");
        if (family_type.contains(name)) problem(line, "second TYPE");
        family_type[name] = type;
        if (type == "counter" && !name.ends_with("_total")) problem(line, "counter without _total");
      }
      continue;
    }
    std::size_t at = 0;
    while (at < line.size() && line[at] != '{' && line[at] != ' ') ++at;
    const auto name = line.substr(0, at);
    if (!std::regex_match(name, metric_name)) {
      problem(line, "bad sample name");
      continue;
    }
    std::map<std::string, std::string> labels;
    if (at >= line.size() || !parse_labels(line, at, labels) || at >= line.size() ||
        line[at] != ' ') {
      problem(line, "bad labels");
      continue;
    }
    double value = 0;
    if (!parse_value(line.substr(at + 1), value)) {
      problem(line, "bad value");
      continue;
    }
    const auto family = family_of(name);
    if (family.empty()) problem(line, "sample before its TYPE");
    if (family_type[family] == "counter" && value < 0) problem(line, "negative counter");
    if (name.ends_with("_bucket") && family_type[family] == "histogram") {
      auto le = labels.find("le");
      double bound = 0;
      if (le == labels.end() || !parse_value(le->second, bound)) {
        problem(line, "bucket without le");
      } else {
        auto rest = labels;
        rest.erase("le");
        buckets[series(family, rest)].emplace_back(bound, value);
      }
    }
    const auto key = series(name, labels);
    if (!parsed.samples.emplace(key, value).second) problem(line, "duplicate series");
  }
  for (const auto& [key, list] : buckets) {
    for (std::size_t i = 1; i < list.size(); ++i)
      if (list[i].first <= list[i - 1].first || list[i].second < list[i - 1].second)
        parsed.problems.push_back(key + ": buckets not ascending and cumulative");
    if (list.empty() || !std::isinf(list.back().first)) {
      parsed.problems.push_back(key + ": no +Inf bucket");
      continue;
    }
    // _count of the same labels equals the +Inf bucket.
    auto brace = key.find('{');
    auto count_key = key.substr(0, brace) + "_count" + key.substr(brace);
    auto count = parsed.samples.find(count_key);
    if (count == parsed.samples.end() || count->second != list.back().second)
      parsed.problems.push_back(key + ": _count differs from the +Inf bucket");
  }
  return parsed;
}

inline double PrometheusText::sum(const std::string& name,
                                  const std::map<std::string, std::string>& labels) const {
  double total = 0;
  for (const auto& [key, value] : samples) {
    if (key != name && !key.starts_with(name + "{")) continue;
    bool all = true;
    for (const auto& [label, wanted] : labels)
      if (key.find(label + "=\"" + wanted + "\"") == std::string::npos) all = false;
    if (all) total += value;
  }
  return total;
}

}  // namespace memwire::test_support
