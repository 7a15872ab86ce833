#include <algorithm>
#include <cstdlib>

#include "ibprobe/collectors.h"
#include "ibprobe/exposition.h"

namespace ibprobe::collectors {
namespace {

// Reads back label text this set rendered: name="escaped value",... (names never hold '=').
void parse_labels(std::string_view text, std::vector<prometheus::ClientMetric::Label>& out) {
  while (!text.empty()) {
    const auto equals = text.find('=');
    prometheus::ClientMetric::Label label;
    label.name = std::string(text.substr(0, equals));
    std::size_t i = equals + 2;  // past ="
    for (; text[i] != '"'; ++i) {
      if (text[i] == '\\') {
        ++i;
        label.value += text[i] == 'n' ? '\n' : text[i];
      } else {
        label.value += text[i];
      }
    }
    out.push_back(std::move(label));
    text.remove_prefix(std::min(i + 2, text.size()));  // past the quote and the comma
  }
}

void append_label_text(std::string& out, std::initializer_list<MetricSet::ExtraLabel> labels) {
  const auto start = out.size();
  for (const auto& [name, value] : labels) {
    if (out.size() != start) out += ',';
    out += name;
    out += "=\"";
    exposition::append_escaped(out, value);
    out += '"';
  }
}

// A histogram's series name after the family's: what prometheus-cpp appends.
constexpr std::string_view kSuffixText[] = {"_count", "_sum", "_bucket"};
constexpr std::size_t kMaxSuffixSize =
    std::ranges::max(kSuffixText, {}, [](std::string_view suffix) { return suffix.size(); }).size();

// A bucket's upper bound from its rendered le="..." label (strtod reads "+Inf" too).
double parse_bound(std::string_view extra) {
  std::vector<prometheus::ClientMetric::Label> le;
  parse_labels(extra, le);
  return std::strtod(le.at(0).value.c_str(), nullptr);
}

}  // namespace

MetricSet::Family& MetricSet::family(std::string_view name, std::string_view help,
                                     prometheus::MetricType type) {
  // Collectors add the samples of one family in a row, or a port's families in turn: the last
  // family and the one after it are the likely ones.
  if (!families_.empty()) {
    if (families_[last_family_].name == name) return families_[last_family_];
    const std::size_t next = (last_family_ + 1) % families_.size();
    if (families_[next].name == name) return families_[last_family_ = next];
  }
  const auto it = std::find_if(families_.begin(), families_.end(),
                               [&](const Family& f) { return f.name == name; });
  if (it != families_.end()) {
    last_family_ = static_cast<std::size_t>(it - families_.begin());
    return *it;
  }
  families_.push_back(Family{std::string(name), std::string(help), type, {}, {}, false});
  last_family_ = families_.size() - 1;
  return families_.back();
}

MetricSet::Span MetricSet::render(const Labels& labels) {
  if (rendered_any_ && labels == last_labels_) return last_span_;
  const auto offset = label_text_.size();
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) label_text_ += ',';
    first = false;
    label_text_ += name;
    label_text_ += "=\"";
    exposition::append_escaped(label_text_, value);
    label_text_ += '"';
  }
  last_labels_ = labels;  // reuses the strings' storage from the port before
  last_span_ = {static_cast<std::uint32_t>(offset),
                static_cast<std::uint32_t>(label_text_.size() - offset)};
  rendered_any_ = true;
  return last_span_;
}

MetricSet::Span MetricSet::render(std::initializer_list<ExtraLabel> extra) {
  const auto offset = label_text_.size();
  append_label_text(label_text_, extra);
  return {static_cast<std::uint32_t>(offset),
          static_cast<std::uint32_t>(label_text_.size() - offset)};
}

std::string MetricSet::render_text(std::initializer_list<ExtraLabel> extra) {
  std::string text;
  append_label_text(text, extra);
  return text;
}

MetricSet::LabelSet MetricSet::label_set(const Labels& labels) {
  return LabelSet(render(labels));
}

MetricSet::LabelSet MetricSet::label_set(std::initializer_list<ExtraLabel> labels) {
  return LabelSet(render(labels));
}

MetricSet::LabelSet MetricSet::rendered_label_set(std::string_view rendered) {
  const auto offset = label_text_.size();
  label_text_.append(rendered);
  return LabelSet(
      {static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(rendered.size())});
}

MetricSet::FamilyHandle MetricSet::family_handle(std::string_view name, std::string_view help,
                                                 prometheus::MetricType type) {
  return FamilyHandle(static_cast<std::size_t>(&family(name, help, type) - families_.data()));
}

void MetricSet::add(std::string_view family_name, std::string_view help,
                    prometheus::MetricType type, const Labels& labels, double value) {
  add(family_name, help, type, label_set(labels), value);
}

void MetricSet::add(std::string_view family_name, std::string_view help,
                    prometheus::MetricType type, LabelSet labels, double value) {
  family(family_name, help, type).samples.push_back({labels.span_, {}, value});
}

void MetricSet::add(std::string_view family_name, std::string_view help,
                    prometheus::MetricType type, const Labels& labels,
                    std::initializer_list<ExtraLabel> extra, double value) {
  add(family_name, help, type, label_set(labels), extra, value);
}

void MetricSet::add(std::string_view family_name, std::string_view help,
                    prometheus::MetricType type, LabelSet labels,
                    std::initializer_list<ExtraLabel> extra, double value) {
  auto& f = family(family_name, help, type);
  f.samples.push_back({labels.span_, render(extra), value});
}

void MetricSet::add_rendered(std::string_view family_name, std::string_view help,
                             prometheus::MetricType type, const Labels& labels,
                             std::string_view rendered_extra, double value) {
  add_rendered(family_name, help, type, label_set(labels), rendered_extra, value);
}

void MetricSet::add_rendered(std::string_view family_name, std::string_view help,
                             prometheus::MetricType type, LabelSet labels,
                             std::string_view rendered_extra, double value) {
  add_rendered(family_handle(family_name, help, type), labels, rendered_extra, value);
}

void MetricSet::add_rendered(FamilyHandle family, LabelSet labels, std::string_view rendered_extra,
                             double value) {
  const auto offset = label_text_.size();
  label_text_.append(rendered_extra);
  families_[family.index_].samples.push_back(
      {labels.span_,
       {static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(rendered_extra.size())},
       value});
}

void MetricSet::add_histogram(std::string_view family_name, std::string_view help,
                              const Labels& labels, std::span<const double> upper_bounds,
                              std::span<const std::uint64_t> cumulative_counts, std::uint64_t count,
                              double sum) {
  const auto at_labels = label_set(labels).span_;
  auto& f = family(family_name, help, prometheus::MetricType::Histogram);
  auto push = [&f](Span labels, Span extra, Suffix suffix, double value) {
    f.samples.push_back({labels, extra, value});
    f.suffixes.push_back(suffix);
  };
  push(at_labels, {}, Suffix::kCount, static_cast<double>(count));
  push(at_labels, {}, Suffix::kSum, sum);
  std::string bound;
  for (std::size_t i = 0; i < upper_bounds.size(); ++i) {
    bound.clear();
    exposition::append_value(bound, upper_bounds[i]);
    push(at_labels, render({{"le", bound}}), Suffix::kBucket,
         static_cast<double>(cumulative_counts[i]));
  }
  push(at_labels, render({{"le", "+Inf"}}), Suffix::kBucket, static_cast<double>(count));
}

void MetricSet::declare(std::string_view family_name, std::string_view help,
                        prometheus::MetricType type) {
  family(family_name, help, type).declared = true;
}

void MetricSet::merge(const MetricSet& other) {
  const auto shift = static_cast<std::uint32_t>(label_text_.size());
  label_text_ += other.label_text_;
  for (const auto& incoming : other.families_) {
    if (!incoming.written()) continue;
    auto& f = family(incoming.name, incoming.help, incoming.type);
    f.declared = f.declared || incoming.declared;
    f.samples.reserve(f.samples.size() + incoming.samples.size());
    for (auto sample : incoming.samples) {
      sample.labels.offset += shift;
      sample.extra.offset += shift;
      f.samples.push_back(sample);
    }
    f.suffixes.insert(f.suffixes.end(), incoming.suffixes.begin(), incoming.suffixes.end());
  }
}

bool MetricSet::empty() const {
  return std::all_of(families_.begin(), families_.end(),
                     [](const Family& f) { return f.samples.empty(); });
}

void MetricSet::clear() {
  for (auto& f : families_) {
    f.samples.clear();
    f.suffixes.clear();
    f.declared = false;
  }
  label_text_.clear();
  last_family_ = 0;
  rendered_any_ = false;
}

std::vector<prometheus::MetricFamily> MetricSet::take() && {
  std::vector<prometheus::MetricFamily> result;
  result.reserve(families_.size());
  for (const auto& f : families_) {
    if (!f.written()) continue;
    prometheus::MetricFamily family{f.name, f.help, f.type, {}};
    if (f.type == prometheus::MetricType::Histogram) {
      // Each histogram's samples in the order add_histogram() added them: _count first.
      for (std::size_t i = 0; i < f.samples.size(); ++i) {
        const auto& sample = f.samples[i];
        switch (f.suffixes[i]) {
          case Suffix::kCount:
            family.metric.emplace_back();
            parse_labels(text(sample.labels), family.metric.back().label);
            family.metric.back().histogram.sample_count = static_cast<std::uint64_t>(sample.value);
            break;
          case Suffix::kSum:
            family.metric.back().histogram.sample_sum = sample.value;
            break;
          case Suffix::kBucket:
            family.metric.back().histogram.bucket.push_back(
                {static_cast<std::uint64_t>(sample.value), parse_bound(text(sample.extra))});
            break;
        }
      }
      result.push_back(std::move(family));
      continue;
    }
    family.metric.reserve(f.samples.size());
    for (const auto& sample : f.samples) {
      prometheus::ClientMetric metric;
      parse_labels(text(sample.labels), metric.label);
      parse_labels(text(sample.extra), metric.label);
      switch (f.type) {
        case prometheus::MetricType::Counter:
          metric.counter.value = sample.value;
          break;
        case prometheus::MetricType::Gauge:
          metric.gauge.value = sample.value;
          break;
        default:
          metric.untyped.value = sample.value;
          break;
      }
      family.metric.push_back(std::move(metric));
    }
    result.push_back(std::move(family));
  }
  *this = MetricSet();
  return result;
}

void MetricSet::append_text(std::string& out) const {
  const MetricSet* const self = this;
  append_text(std::span(&self, 1), out);
}

void MetricSet::append_text(std::span<const MetricSet* const> sets, std::string& out) {
  // Each family with samples, grouped by name in order of first appearance, as merge() would
  // group them: the sets of one collector hold the same families in the same order, so a set's
  // family is most likely in the group after the one before, and its first family in the
  // group the set before began with.
  struct Part {
    const MetricSet* set;
    const Family* family;
    std::size_t group;
  };
  std::vector<Part> parts;
  std::vector<const Family*> heads;  // the first family of each group: its HELP and TYPE
  std::size_t last = 0;
  std::size_t set_start = 0;
  auto matches = [&heads](std::size_t group, const Family& f) {
    return group < heads.size() && heads[group]->name == f.name;
  };
  auto group_of = [&](const Family& f, bool first_in_set) {
    if (first_in_set && matches(set_start, f)) return last = set_start;
    if (matches(last, f)) return last;
    if (matches(last + 1, f)) return ++last;
    for (std::size_t g = 0; g < heads.size(); ++g) {
      if (matches(g, f)) return last = g;
    }
    heads.push_back(&f);
    return last = heads.size() - 1;
  };
  for (const MetricSet* set : sets) {
    bool first_in_set = true;
    for (const auto& f : set->families_) {
      if (!f.written()) continue;
      parts.push_back({set, &f, group_of(f, first_in_set)});
      if (first_in_set) set_start = last;
      first_in_set = false;
    }
  }
  // Ordered by group, and within a group by set (a counting sort: one pass to count, one to
  // place).
  std::vector<std::size_t> group_start(heads.size() + 1);
  for (const auto& part : parts) ++group_start[part.group + 1];
  for (std::size_t g = 1; g < group_start.size(); ++g) group_start[g] += group_start[g - 1];
  std::vector<Part> ordered(parts.size());
  for (const auto& part : parts) ordered[group_start[part.group]++] = part;
  parts.swap(ordered);

  // The page's size bounded from above, then written in place: one allocation for the page (a
  // whole fabric's is megabytes), and no length check per piece.
  const std::size_t start = out.size();
  std::size_t size = start;
  constexpr std::size_t kPunctuation = std::string_view("{,} \n").size();
  for (const auto* head : heads) size += exposition::family_head_size(head->name, head->help);
  for (const auto& part : parts) {
    const std::size_t suffix = part.family->suffixes.empty() ? 0 : kMaxSuffixSize;
    for (const auto& sample : part.family->samples) {
      size += part.family->name.size() + suffix + sample.labels.size + sample.extra.size +
              kPunctuation + exposition::kMaxValueSize;
    }
  }
  out.resize_and_overwrite(size, [&parts, &heads, start](char* data, std::size_t) {
    char* p = data + start;
    auto put = [&p](std::string_view text) { p = exposition::write_text(p, text); };
    std::size_t group = heads.size();
    for (const auto& [set, f, part_group] : parts) {
      if (part_group != group) {
        group = part_group;
        const Family& head = *heads[group];
        p = exposition::write_family_head(p, head.name, head.help, head.type);
      }
      for (std::size_t i = 0; i < f->samples.size(); ++i) {
        const auto& sample = f->samples[i];
        put(f->name);
        if (!f->suffixes.empty()) put(kSuffixText[static_cast<std::size_t>(f->suffixes[i])]);
        if (sample.labels.size != 0 || sample.extra.size != 0) {
          *p++ = '{';
          put(set->text(sample.labels));
          if (sample.labels.size != 0 && sample.extra.size != 0) *p++ = ',';
          put(set->text(sample.extra));
          *p++ = '}';
        }
        *p++ = ' ';
        p = exposition::write_value(p, sample.value);
        *p++ = '\n';
      }
    }
    return static_cast<std::size_t>(p - data);
  });
}

}  // namespace ibprobe::collectors
