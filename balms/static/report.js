// balms report: filter a run page's predictions by what went wrong. The filter comes from the URL, so a link
// (run.html#filter=unparseable, or ?filter=unparseable) opens the filtered view; without JS every row shows.
(function () {
  "use strict";

  function requested() {
    var hash = new URLSearchParams(location.hash.replace(/^#/, ""));
    var query = new URLSearchParams(location.search);
    return hash.get("filter") || query.get("filter") || "all";
  }

  function apply() {
    var table = document.getElementById("predictions");
    if (!table) return;
    var known = {};
    var buttons = document.querySelectorAll(".filters a[data-filter]");
    buttons.forEach(function (a) { known[a.dataset.filter] = a; });
    var name = requested();
    var status = document.getElementById("filter-status");
    if (!known[name]) {  // a mistyped filter must not look like "nothing matched"
      status.textContent = "unknown filter \u201c" + name + "\u201d: showing every prediction";
      name = "all";
    }
    var rows = table.tBodies[0].rows, shown = 0;
    for (var i = 0; i < rows.length; i++) {
      var flags = (rows[i].dataset.flags || "").split(" ");
      var keep = name === "all" || flags.indexOf(name) >= 0;
      rows[i].hidden = !keep;
      if (keep) shown++;
    }
    buttons.forEach(function (a) { a.classList.toggle("active", a.dataset.filter === name); });
    document.body.dataset.filter = name;
    if (known[requested()]) {
      status.textContent = "showing " + shown + " of " + rows.length + " predictions" +
        (name === "all" ? "" : ": " + known[name].title);
    }
  }

  window.addEventListener("hashchange", apply);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", apply);
  else apply();
})();
