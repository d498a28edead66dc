// base64 and integer fields of etcd's JSON gateway (declared in
// etcd_connection.h).
#include <cstring>

#include "etcd_connection.h"

namespace ccrun::store::etcd {

namespace {

constexpr char kAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = at(i) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t v = at(i) << 16 | at(i + 1) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : text) {
    if (ch == '=') break;
    const char* p = std::strchr(kAlphabet, ch);
    if (ch == '\0' || p == nullptr) {
      throw ProtocolError("etcd: reply holds invalid base64 (character " +
                          std::to_string(static_cast<int>(ch)) + ")");
    }
    acc = acc << 6 | static_cast<uint32_t>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

int64_t int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  if (it->is_boolean()) return it->get<bool>() ? 1 : 0;
  const auto& s = it->get_ref<const std::string&>();
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    throw ProtocolError("etcd: reply field \"" + std::string(name) +
                        "\" is not an integer: \"" + s + "\"");
  }
}

}  // namespace ccrun::store::etcd
