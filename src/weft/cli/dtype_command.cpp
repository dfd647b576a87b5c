// `weft dtype VALUE...` shows what each value becomes in f32, f16, bf16 and int8, bit by bit;
// `weft dtype --table` shows what each format can hold. The numbers come from
// core/number_format.h, which derives them from weft's own conversions.
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/error.h"
#include "weft/core/number_format.h"

namespace weft::cli {

namespace {

constexpr DType kShownFloats[] = {DType::f32, DType::f16, DType::bf16};
constexpr DType kTableFormats[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i32, DType::i8, DType::u8};

double parse_value(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(begin, &end);
  bool whole = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0])) && end != begin && *end == '\0';
  WEFT_CHECK(whole, ValueError, "VALUE: must be a number such as 0.1, -2.5e-3, 70000, inf, -inf or nan (or one of the ",
             "flags --scale, --table, --json), got '", text, "'");
  WEFT_CHECK(!(errno == ERANGE && std::isinf(value)), ValueError, "VALUE: must be within f64's range (largest finite ",
             "1.7976931348623157e+308) or inf, got '", text, "'");
  return value;
}

std::string printed(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// The exact decimal, cut after 40 significant digits ("…" marks the cut): every rounding shows,
// without a hundred digits for tiny values. Positional numbers have at most 21 integer digits,
// so the cut always falls in the fraction.
std::string shown(double value) {
  constexpr int max_digits = 40;
  std::string exact = exact_decimal(value);
  int digits = 0;
  bool significant = false;
  for (size_t i = 0; i < exact.size() && exact[i] != 'e'; ++i) {
    if (exact[i] >= '1' && exact[i] <= '9') significant = true;
    if (significant && std::isdigit(static_cast<unsigned char>(exact[i])) && ++digits > max_digits) {
      size_t e = exact.find('e');
      return exact.substr(0, i) + "…" + (e == std::string::npos ? "" : exact.substr(e));
    }
  }
  return exact;
}

// Integers below 10^10 in full (65504, -2147483648), values whose exact decimal is short as
// such (0.0078125), anything else to four digits.
std::string compact(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e10) return printed("%.0f", value);
  std::string exact = exact_decimal(value);
  if (exact.size() <= 9) return exact;
  return printed("%.4g", value);
}

std::string power_of_two(double value) {
  return str("2^", std::ilogb(value), " = ", compact(value));
}

// ---- one value ---------------------------------------------------------------------------

std::string float_fields(const FloatBits& b, const FormatLimits& limits) {
  std::string sign = b.negative ? "1" : "0";
  switch (b.kind) {
    case FloatKind::normal:
      return str("= (-1)^", sign, " × 2^", b.exponent, " × ", shown(b.significand), "   (exponent bits ",
                 b.exponent_field, " - bias ", limits.exponent_bias, ")");
    case FloatKind::subnormal:
      return str("= (-1)^", sign, " × 2^", b.exponent, " × ", shown(b.significand),
                 "   (subnormal: exponent bits 0 mean 1 - bias ", limits.exponent_bias, ", and no implicit 1)");
    case FloatKind::zero:
      return str("= ", b.negative ? "-" : "+", "0   (exponent and mantissa bits all 0)");
    case FloatKind::infinity:
      return str("= ", b.negative ? "-" : "+", "inf   (exponent bits all 1, mantissa 0)");
    case FloatKind::nan:
      return "= NaN   (exponent bits all 1, mantissa not 0)";
  }
  return {};
}

std::vector<std::string> float_notes(const StoredFloat& s, const FormatLimits& limits) {
  const FloatBits& b = s.stored;
  const char* name = dtype_name(b.dtype);
  std::vector<std::string> notes;
  if (s.overflow) {
    double first_infinite = limits.max + std::ldexp(1.0, limits.exponent_bias - limits.mantissa_bits - 1);
    notes.push_back(str("overflow: ", name, "'s largest finite value is ", compact(limits.max), "; from ",
                        compact(first_infinite), " (half a step beyond it) values round to inf"));
  }
  if (s.underflow)
    notes.push_back(str("underflow: |value| is at most half ", name, "'s smallest subnormal ",
                        power_of_two(limits.min_subnormal), ", so it rounds to 0"));
  if (b.kind == FloatKind::subnormal)
    notes.push_back(str("subnormal: below ", name, "'s smallest normal ", power_of_two(limits.min_normal), ", only ",
                        std::bit_width(b.mantissa_field), " significant bits left"));
  if (b.kind == FloatKind::zero && b.negative) notes.push_back("-0: the sign bit is set; -0 == +0 in comparisons");
  if (std::isnan(s.given)) notes.push_back("NaN stays NaN, as a quiet NaN");
  if (std::isinf(s.given)) notes.push_back("infinity is exact in every float format");
  return notes;
}

std::string error_text(double stored, double given, double abs_error, double rel_error) {
  if (std::isnan(given)) return "";
  if (abs_error == 0) return "exact";
  return str("error ", stored > given ? "+" : "-", printed("%.3g", abs_error), " (relative ",
             printed("%.3g", rel_error), ")");
}

void print_float(const StoredFloat& s) {
  const FloatBits& b = s.stored;
  FormatLimits limits = format_limits(b.dtype);
  std::printf("  %-5s %s  %s\n", dtype_name(b.dtype), b.bit_groups().c_str(), b.hex().c_str());
  std::printf("        %s\n", float_fields(b, limits).c_str());
  std::string error = error_text(b.value, s.given, s.abs_error, s.rel_error);
  std::printf("        stored %s%s%s\n", shown(b.value).c_str(), error.empty() ? "" : "   ", error.c_str());
  for (const std::string& note : float_notes(s, limits)) std::printf("        %s\n", note.c_str());
}

nlohmann::json float_json(const StoredFloat& s) {
  const FloatBits& b = s.stored;
  nlohmann::json j = {{"bits", b.bit_groups()}, {"hex", b.hex()}, {"class", float_kind_name(b.kind)},
                      {"sign", b.negative ? 1 : 0}, {"exponent_field", b.exponent_field},
                      {"mantissa_field", b.mantissa_field}, {"stored", b.value},
                      {"stored_exact", exact_decimal(b.value)}, {"abs_error", s.abs_error}, {"rel_error", s.rel_error},
                      {"notes", float_notes(s, format_limits(b.dtype))}};
  if (std::isfinite(b.value)) {
    j["exponent"] = b.exponent;
    j["significand"] = b.significand;
  }
  return j;
}

std::string int8_bits(int8_t q) {
  auto pattern = static_cast<uint8_t>(q);
  std::string out;
  for (int bit = 7; bit >= 0; --bit) {
    out += ((pattern >> bit) & 1u) ? '1' : '0';
    if (bit == 7) out += ' ';
  }
  return out;
}

std::string int8_hex(int8_t q) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(static_cast<uint8_t>(q)));
  return buf;
}

std::vector<std::string> int8_notes(const Int8Quantized& r) {
  std::vector<std::string> notes;
  if (r.clamped)
    notes.push_back(str("clamped: |value| / scale rounds beyond 127; int8 holds ±127 × scale = ±",
                        compact(127 * r.scale), " at most"));
  else if (r.q == 0 && r.given != 0)
    notes.push_back(str("rounds to 0: |value| is at most half the scale ", compact(r.scale)));
  return notes;
}

void print_int8(double value, double scale) {
  if (std::isnan(value)) {
    std::printf("  int8  int8 has no NaN: nothing to store\n");
    return;
  }
  Int8Quantized r = quantize_int8_symmetric(value, scale);
  int q = r.q;
  std::string twos_complement = q < 0 ? str(" = -128 + ", q + 128) : "";
  std::printf("  int8  %s  %s\n", int8_bits(r.q).c_str(), int8_hex(r.q).c_str());
  std::printf("        value / scale = %s → q = %d%s   (round half to even, clamp to ±127%s)\n",
              printed("%.6g", value / scale).c_str(), q, twos_complement.c_str(),
              q < 0 ? "; two's complement: the top bit weighs -128" : "");
  std::printf("        stored q × scale = %s   %s\n", shown(r.dequantized).c_str(),
              error_text(r.dequantized, value, r.abs_error, r.rel_error).c_str());
  for (const std::string& note : int8_notes(r)) std::printf("        %s\n", note.c_str());
}

nlohmann::json int8_json(double value, double scale) {
  if (std::isnan(value)) return {{"notes", {"int8 has no NaN: nothing to store"}}};
  Int8Quantized r = quantize_int8_symmetric(value, scale);
  return {{"bits", int8_bits(r.q)}, {"hex", int8_hex(r.q)}, {"q", r.q}, {"stored", r.dequantized},
          {"abs_error", r.abs_error}, {"rel_error", r.rel_error}, {"clamped", r.clamped}, {"notes", int8_notes(r)}};
}

// The int8 scale and a sentence saying where it came from.
std::pair<double, std::string> choose_scale(std::optional<double> given, const std::vector<double>& values) {
  if (given) return {*given, "given by --scale"};
  if (std::optional<double> computed = int8_symmetric_scale(values))
    return {*computed, "max|value| / 127 over the values given"};
  return {1.0, "1: no finite non-zero value to take max|value| / 127 from (--scale S to choose)"};
}

void show_values(const std::vector<std::string>& texts, const std::vector<double>& values,
                 std::optional<double> scale_option, nlohmann::json* json) {
  auto [scale, scale_source] = choose_scale(scale_option, values);
  if (json) {
    (*json)["int8_scale"] = scale;
    (*json)["int8_scale_source"] = scale_source;
    nlohmann::json& rows = (*json)["values"] = nlohmann::json::array();
    for (size_t i = 0; i < values.size(); ++i) {
      nlohmann::json row = {{"input", texts[i]}, {"f64", values[i]},
                            {"f64_hex", float_bits(std::bit_cast<uint64_t>(values[i]), DType::f64).hex()},
                            {"f64_exact", exact_decimal(values[i])}};
      for (DType t : kShownFloats) row[dtype_name(t)] = float_json(store_float(values[i], t));
      row["int8"] = int8_json(values[i], scale);
      rows.push_back(row);
    }
    return;
  }
  std::printf("int8: symmetric, scale %s (%s)\n", printed("%.9g", scale).c_str(), scale_source.c_str());
  std::printf("error = stored - value, relative = |error| / |value|, against the value as an f64\n");
  for (size_t i = 0; i < values.size(); ++i) {
    FloatBits f64 = float_bits(std::bit_cast<uint64_t>(values[i]), DType::f64);
    std::printf("\n%s   (f64 %s = %s)\n", texts[i].c_str(), f64.hex().c_str(), shown(values[i]).c_str());
    for (DType t : kShownFloats) print_float(store_float(values[i], t));
    print_int8(values[i], scale);
  }
}

// ---- the table ---------------------------------------------------------------------------

// The formats of the table, by name: weft's dtypes, and TF32 after f32 (no dtype: the tensor cores'
// multiply format, its values f32 in memory, so 4 bytes).
std::vector<std::pair<std::string, FormatLimits>> table_rows() {
  std::vector<std::pair<std::string, FormatLimits>> rows;
  for (DType t : kTableFormats) {
    rows.emplace_back(dtype_name(t), format_limits(t));
    if (t == DType::f32) rows.emplace_back("tf32", float_limits(8, 10, 19));
  }
  return rows;
}

void show_table(nlohmann::json* json) {
  const auto formats = table_rows();
  if (json) {
    nlohmann::json& rows = (*json)["formats"] = nlohmann::json::array();
    for (const auto& [name, l] : formats) {
      nlohmann::json row = {{"dtype", name}, {"bits", l.bits}, {"bytes", dtype_size(l.dtype)},
                            {"precision_bits", l.precision_bits}, {"lowest", l.lowest}, {"max", l.max},
                            {"epsilon", l.epsilon}, {"decimal_digits", l.decimal_digits},
                            {"guaranteed_digits", l.guaranteed_digits}};
      if (l.exponent_bits > 0) {
        row["exponent_bits"] = l.exponent_bits;
        row["mantissa_bits"] = l.mantissa_bits;
        row["exponent_bias"] = l.exponent_bias;
        row["min_normal"] = l.min_normal;
        row["min_subnormal"] = l.min_subnormal;
      }
      rows.push_back(row);
    }
    return;
  }
  std::printf("%-6s %4s %5s %8s %8s %5s  %-10s  %-22s  %-22s  %-17s  %s\n", "float", "bits", "bytes", "exponent",
              "mantissa", "bias", "max finite", "smallest normal", "smallest subnormal", "epsilon", "decimal digits");
  for (const auto& [name, l] : formats) {
    if (l.exponent_bits == 0) continue;
    std::printf("%-6s %4d %5zu %8d %8d %5d  %-10s  %-22s  %-22s  %-17s  %.2f (%d)\n", name.c_str(), l.bits,
                dtype_size(l.dtype), l.exponent_bits, l.mantissa_bits, l.exponent_bias, compact(l.max).c_str(),
                power_of_two(l.min_normal).c_str(), power_of_two(l.min_subnormal).c_str(),
                power_of_two(l.epsilon).c_str(), l.decimal_digits, l.guaranteed_digits);
  }
  std::printf("\n%-6s %4s %5s  %-26s  %4s  %s\n", "int", "bits", "bytes", "range", "step", "decimal digits");
  for (const auto& [name, l] : formats) {
    if (l.exponent_bits > 0) continue;
    std::string range = compact(l.lowest) + " .. " + compact(l.max);
    std::printf("%-6s %4d %5zu  %-26s  %4s  %.2f (%d)\n", name.c_str(), l.bits, dtype_size(l.dtype), range.c_str(),
                compact(l.epsilon).c_str(), l.decimal_digits, l.guaranteed_digits);
  }
  std::printf(
      "\nComputed from the field widths (sign 1 bit, then exponent and mantissa bits):\n"
      "  bias = 2^(exponent - 1) - 1; max finite = (2 - 2^-mantissa) × 2^bias;\n"
      "  smallest normal = 2^(1 - bias); smallest subnormal = 2^(1 - bias - mantissa);\n"
      "  epsilon = 2^-mantissa, the gap between 1 and the next value.\n"
      "  decimal digits = log10(2^p) with p = mantissa + 1 significant bits (an integer's value bits);\n"
      "  in parentheses the digits guaranteed to survive decimal -> format -> decimal, C++'s digits10:\n"
      "  floor((p - 1) × log10 2) for floats, floor(p × log10 2) for integers.\n"
      "tf32 is not a storage format: NVIDIA's tensor cores (A100 on) multiply f32 matrices in it, f32's range\n"
      "with f16's 10 mantissa bits, and the values stay f32 (4 bytes) in memory (PyTorch: allow_tf32).\n");
}

void dtype_command(const std::vector<std::string>& texts, std::optional<double> scale, bool table, bool json) {
  WEFT_CHECK(table || !texts.empty(), ValueError,
             "weft dtype needs at least one VALUE (such as 0.1 or 70000) or --table; see weft dtype --help");
  // Every value is read before anything is printed.
  std::vector<double> values;
  for (const std::string& text : texts) values.push_back(parse_value(text));
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json* json_out = json ? &out : nullptr;
  if (table) show_table(json_out);
  if (!texts.empty()) {
    if (table && !json) std::printf("\n");
    show_values(texts, values, scale, json_out);
  }
  if (json) std::cout << out.dump() << "\n";
}

}  // namespace

void add_dtype_command(CLI::App& app, std::function<void()>& run) {
  auto scale = std::make_shared<std::optional<double>>();
  auto table = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  CLI::App* d = app.add_subcommand(
      "dtype", "VALUE... in f32, f16, bf16 and int8, bit by bit (sign, exponent, mantissa), with the rounding error; "
               "--table: what each format can hold");
  // Values are taken as extras rather than a positional so that -inf, -nan and -0.5e-3 read as
  // numbers, not as unknown short options.
  d->allow_extras();
  number_flag(d, "--scale", *scale, "int8 scale (default: max|value| / 127 over the values)",
              {.min = 0, .min_open = true});
  d->add_flag("--table", *table, "size, range, smallest normal and subnormal, epsilon and decimal digits per format");
  d->add_flag("--json", *json, "print one JSON object instead");
  d->footer("VALUE...: numbers after `weft dtype`, each a decimal or scientific number, inf, -inf or nan\n"
            "(C's strtod syntax, so 0x1p-24 works too); negative ones as they are: weft dtype -inf -0.5");
  d->callback([&run, d, scale, table, json] {
    std::vector<std::string> texts = d->remaining();
    run = [=] { dtype_command(texts, *scale, *table, *json); };
  });
}

}  // namespace weft::cli
