#include "ibprobe/ethtool_netlink.h"

#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "netlink_attributes.h"

namespace ibprobe::collectors {
namespace {

std::error_code errno_code(int value) {
  return {value, std::system_category()};
}

std::unexpected<std::error_code> bad_message() {
  return std::unexpected(errno_code(EBADMSG));
}

// The family's answers are small (a module page, a FEC reply); the controller's description of
// the ethtool family, with its operations and policies, is the largest, a few kilobytes.
constexpr std::size_t kReceiveBuffer = 64 * 1024;

// The attribute of `type` among `attributes`, if any.
std::optional<netlink::Attribute> find(const std::vector<netlink::Attribute>& attributes,
                                       std::uint16_t type) {
  for (const auto& attribute : attributes) {
    if (attribute.type == type) return attribute;
  }
  return std::nullopt;
}

// A request header nest naming the netdev, with ETHTOOL_A_HEADER_FLAGS when `flags` is set.
std::vector<std::uint8_t> header_nest(std::uint16_t type, const std::string& netdev,
                                      std::uint32_t flags = 0) {
  std::vector<std::uint8_t> header;
  netlink::put_string(header, ETHTOOL_A_HEADER_DEV_NAME, netdev);
  if (flags != 0) netlink::put_value(header, ETHTOOL_A_HEADER_FLAGS, flags);
  std::vector<std::uint8_t> nest;
  netlink::put_attribute(nest, type | NLA_F_NESTED, header);
  return nest;
}

}  // namespace

std::expected<EthtoolNetlink, std::error_code> EthtoolNetlink::open() {
  UniqueFd socket(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC));
  if (!socket) return std::unexpected(errno_code(errno));
  EthtoolNetlink ethtool(std::move(socket), GENL_ID_CTRL);
  std::vector<std::uint8_t> name;
  netlink::put_string(name, CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME);
  const auto reply = ethtool.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, name);
  if (!reply) return std::unexpected(reply.error());
  const auto attributes = netlink::attributes_of(*reply);
  if (!attributes) return bad_message();
  const auto id = find(*attributes, CTRL_ATTR_FAMILY_ID);
  if (!id || id->payload.size() != sizeof(std::uint16_t)) return bad_message();
  std::memcpy(&ethtool.family_, id->payload.data(), sizeof ethtool.family_);
  return ethtool;
}

std::expected<std::vector<std::uint8_t>, std::error_code> EthtoolNetlink::request(
    std::uint16_t family, std::uint8_t command, std::uint8_t version,
    const std::vector<std::uint8_t>& attributes) {
  const std::uint32_t sequence = ++sequence_;
  const nlmsghdr header{
      .nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + GENL_HDRLEN + attributes.size()),
      .nlmsg_type = family,
      .nlmsg_flags = NLM_F_REQUEST,
      .nlmsg_seq = sequence,
      .nlmsg_pid = 0};
  const genlmsghdr genl{.cmd = command, .version = version, .reserved = 0};
  std::vector<std::uint8_t> message(header.nlmsg_len);
  std::memcpy(message.data(), &header, sizeof header);
  std::memcpy(message.data() + NLMSG_HDRLEN, &genl, sizeof genl);
  std::copy(attributes.begin(), attributes.end(), message.begin() + NLMSG_HDRLEN + GENL_HDRLEN);
  sockaddr_nl kernel{.nl_family = AF_NETLINK, .nl_pad = 0, .nl_pid = 0, .nl_groups = 0};
  if (::sendto(socket_.get(), message.data(), message.size(), 0,
               reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel) < 0) {
    return std::unexpected(errno_code(errno));
  }

  // Answers to earlier requests that failed half way (none should) are skipped by sequence.
  std::vector<std::uint8_t> buffer(kReceiveBuffer);
  for (;;) {
    const ssize_t received =
        ::recv(socket_.get(), buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (received < 0) return std::unexpected(errno_code(errno));
    if (static_cast<std::size_t>(received) > buffer.size()) return bad_message();
    const std::size_t length = static_cast<std::size_t>(received);
    if (length < NLMSG_HDRLEN) return bad_message();
    nlmsghdr answer;
    std::memcpy(&answer, buffer.data(), sizeof answer);
    if (answer.nlmsg_len < NLMSG_HDRLEN || answer.nlmsg_len > length) return bad_message();
    if (answer.nlmsg_seq != sequence) continue;
    if (answer.nlmsg_type == NLMSG_ERROR) {
      nlmsgerr error;
      if (answer.nlmsg_len < NLMSG_HDRLEN + sizeof error) return bad_message();
      std::memcpy(&error, buffer.data() + NLMSG_HDRLEN, sizeof error);
      return std::unexpected(errno_code(error.error == 0 ? EBADMSG : -error.error));
    }
    if (answer.nlmsg_type != family || answer.nlmsg_len < NLMSG_HDRLEN + GENL_HDRLEN) {
      return bad_message();
    }
    return std::vector<std::uint8_t>(buffer.begin() + NLMSG_HDRLEN + GENL_HDRLEN,
                                     buffer.begin() + answer.nlmsg_len);
  }
}

std::expected<std::vector<std::uint8_t>, std::error_code> EthtoolNetlink::module_page(
    const std::string& netdev, const ModulePage& page) {
  auto attributes = header_nest(ETHTOOL_A_MODULE_EEPROM_HEADER, netdev);
  netlink::put_value<std::uint32_t>(attributes, ETHTOOL_A_MODULE_EEPROM_OFFSET, page.offset);
  netlink::put_value<std::uint32_t>(attributes, ETHTOOL_A_MODULE_EEPROM_LENGTH, kModulePageSize);
  netlink::put_value(attributes, ETHTOOL_A_MODULE_EEPROM_PAGE, page.page);
  netlink::put_value(attributes, ETHTOOL_A_MODULE_EEPROM_BANK, page.bank);
  netlink::put_value(attributes, ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS, page.i2c_address);
  const auto reply =
      request(family_, ETHTOOL_MSG_MODULE_EEPROM_GET, ETHTOOL_GENL_VERSION, attributes);
  if (!reply) return std::unexpected(reply.error());
  const auto parsed = netlink::attributes_of(*reply);
  if (!parsed) return bad_message();
  const auto data = find(*parsed, ETHTOOL_A_MODULE_EEPROM_DATA);
  if (!data) return bad_message();
  return std::vector<std::uint8_t>(data->payload.begin(), data->payload.end());
}

std::expected<std::vector<std::uint8_t>, std::error_code> EthtoolNetlink::fec_reply(
    const std::string& netdev) {
  return request(family_, ETHTOOL_MSG_FEC_GET, ETHTOOL_GENL_VERSION,
                 header_nest(ETHTOOL_A_FEC_HEADER, netdev, ETHTOOL_FLAG_STATS));
}

std::expected<ModulePages, std::error_code> read_module_pages(EthtoolNetlink& ethtool,
                                                              const std::string& netdev) {
  ModulePages pages;
  std::set<ModulePage> asked;
  for (bool more = true; more;) {
    more = false;
    const auto wanted = module_pages_to_read(pages);
    if (!wanted) break;  // an identifier no memory map covers: decode_module says so
    for (const auto& page : *wanted) {
      if (!asked.insert(page).second) continue;
      more = true;
      auto bytes = ethtool.module_page(netdev, page);
      if (bytes) {
        pages[page] = std::move(*bytes);
      } else if (page == kLowerPage) {
        return std::unexpected(bytes.error());
      }
    }
  }
  return pages;
}

}  // namespace ibprobe::collectors
