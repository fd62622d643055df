#pragma once

#include <cstddef>

namespace sluice {

// One enumerator and the name it prints as. An enum's names are one table of
// these (a constexpr array beside the function that names a value), read by
// enum_name(); the table lists values, not positions, so reordering the enum
// cannot shift a name onto another value.
template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `e` in `names`, or "?" for a value the table does not list.
template <typename E, size_t N>
constexpr const char* enum_name(E e, const EnumName<E> (&names)[N]) {
  for (const EnumName<E>& n : names)
    if (n.value == e) return n.name;
  return "?";
}

}  // namespace sluice
