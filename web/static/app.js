/* anges web chat. Model output reaches the page only as text (textContent) or as HTML the server has
   sanitized (the *_html fields); nothing here builds HTML from strings. */
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const app = $("app");
  const csrf = app.dataset.csrf;
  // How this page takes part in the browser's one connection: worker, leader, follower or alone (for tests).
  const feed = new window.AngesFeed(app.dataset.feedWorker, (hub) => onHub(hub), (role) => { app.dataset.feedHub = role; });

  const STATUS_LABELS = {
    new: "New", running: "Running", completed: "Completed", help_needed: "Needs help",
    answered: "Answered", interrupted: "Interrupted",
  };
  // An interrupted run that stopped on its own, by why it stopped (a Stop or Ctrl-C reads "Interrupted").
  const STOP_LABELS = {
    model_error: "Failed", model_setup: "Failed", invalid_replies: "Failed", reply_cut_off: "Failed", error: "Failed",
    timeout: "Timed out", event_limit: "Out of steps", model_call_limit: "Out of calls", budget: "Over budget",
    repetition: "Stuck",
  };

  function statusLabel(status, reason) {
    return (status === "interrupted" && STOP_LABELS[reason]) || STATUS_LABELS[status] || status;
  }
  const ANSWER_LABELS = {
    task_completion: "Task complete", agent_text_response: "Answer", agent_requested_help: "Needs your help",
  };
  const LIVE_ANSWER_TYPES = { TASK_COMPLETE: "task_completion", AGENT_TEXT_RESPONSE: "agent_text_response",
    HELP_NEEDED: "agent_requested_help" }; // an answer still streaming, by its action
  const RETURN_TYPES = new Set(["task_completion", "agent_text_response", "agent_requested_help", "task_interrupted"]);
  const RETURN_STATUS = { task_completion: "completed", agent_requested_help: "help_needed",
    agent_text_response: "answered", task_interrupted: "interrupted" };
  // On a touch screen Enter adds a line (there is no Shift key at hand); the Send button sends.
  const ENTER_SENDS = !window.matchMedia("(pointer: coarse)").matches;

  const state = {
    chatId: app.dataset.chatId || null,
    chat: null,
    chats: [],
    sub: null, // the page's subscription to the browser's shared feed (feed.js), while the chat runs
    blocks: new Map(), // child agent blocks by key ("7", "7/3"): {list, pill, name, uid, last, done}
    queue: [], // feed messages waiting for the next paint
    flushing: false,
    lastIndex: -1,
    status: null,
    stopping: false,
    stick: true, // keep the view at the newest step (until the reader scrolls up)
    seenUpdate: null, // the chat's updated_at when its idle page last looked
    draftSettings: {},
    collapsed: new Set(),
    openBatches: new Set(), // batch groups of the sidebar the reader opened
    places: new Map(), // each chat's place in the sidebar: {at, running} (see stableOrder)
    approvals: new Map(), // approval cards by request id: {id, uid, node, state, channel, ...}
    live: new Map(), // the reply streaming now in the chat ("") or a child block: its <li>, shown as text
    plan: null, // the chat's latest plan step (UPDATE_PLAN), shown in the plan panel while it is in force
  };

  // -- small helpers ---------------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setSafeHTML(node, html) {
    // `html` was rendered from Markdown and sanitized by the server (nh3); it carries no script.
    node.innerHTML = html;
    addCopyButtons(node);
  }

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  async function api(method, url, body) {
    const options = { method, credentials: "same-origin", headers: { "Accept": "application/json", "X-CSRF-Token": csrf } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (err) {
      showDisconnected(true);
      throw new ApiError("The server cannot be reached.", 0);
    }
    showDisconnected(false);
    let data = {};
    try { data = await response.json(); } catch (err) { data = {}; }
    if (response.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
      throw new ApiError("Please log in again.", 401);
    }
    if (!response.ok) throw new ApiError(data.error || response.statusText || "Request failed", response.status);
    return data;
  }

  function formatNumber(n) {
    if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (n >= 1e4) return Math.round(n / 1e3) + "k";
    if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return String(n);
  }

  function formatTime(iso) {
    const d = new Date(iso);
    return isNaN(d) ? "" : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function dayLabel(iso) {
    const d = new Date(iso);
    const today = new Date();
    const start = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
    const days = Math.round((start(today) - start(d)) / 86400000);
    if (days === 0) return "Today";
    if (days === 1) return "Yesterday";
    return d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
  }

  function copyText(text, button) {
    const done = () => {
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text) && done());
    } else if (fallbackCopy(text)) {
      done();
    }
  }

  function fallbackCopy(text) {
    const area = el("textarea", "offscreen");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
    area.remove();
    return ok;
  }

  function copyButton(getText, label) {
    const button = el("button", "copy-btn", "Copy");
    button.type = "button";
    button.setAttribute("aria-label", label || "Copy to clipboard");
    button.addEventListener("click", (event) => {
      event.preventDefault();
      event.stopPropagation();
      copyText(getText(), button);
    });
    return button;
  }

  function addCopyButtons(root) {
    for (const pre of root.querySelectorAll("pre")) {
      if (pre.parentElement && pre.parentElement.classList.contains("codeblock")) continue;
      const wrap = el("div", "codeblock");
      pre.replaceWith(wrap);
      wrap.appendChild(pre);
      wrap.appendChild(copyButton(() => pre.textContent, "Copy code"));
    }
  }

  function showNotice(message, kind) {
    const notice = $("notice");
    notice.textContent = message;
    notice.dataset.kind = kind || "error";
    notice.hidden = false;
  }

  function hideNotice() {
    $("notice").hidden = true;
  }

  function showDisconnected(down) {
    $("offline").hidden = !down;
    if (down === (app.dataset.connection === "down")) return;
    app.dataset.connection = down ? "down" : "up"; // the sidebar's dots read as unknown meanwhile
    if (state.status) showRunState(state.status);
  }

  // What the status line says of the run: while the server cannot be reached, nobody knows (the run may have
  // ended with it), so it says that rather than the last state it heard.
  function showRunState(status) {
    const down = app.dataset.connection === "down";
    const pill = $("status-pill");
    pill.dataset.status = down ? "unknown" : status.status;
    pill.textContent = down ? "Disconnected" : statusLabel(status.status, status.reason);
    pill.title = down ? "The server cannot be reached: how the run stands is unknown until it answers again" : "";
    $("working").hidden = down || !status.running;
    $("stop").hidden = down || !status.running;
  }

  // -- the sidebar -----------------------------------------------------------------------------------------

  async function refreshChats() {
    try {
      const data = await api("GET", "/api/chats");
      state.chats = stableOrder(data.chats);
      renderChatList();
      // A run started elsewhere (the CLI, another tab) while this page's feed was closed: follow it.
      const current = state.chats.find((chat) => chat.uid === state.chatId);
      if (current && !state.sub && app.dataset.feed === "idle"
          && (current.running || current.updated_at !== state.seenUpdate)) {
        state.seenUpdate = current.updated_at;
        openFeed();
      }
    } catch (err) {
      if (err.status !== 401) console.warn("chat list:", err.message);
    }
  }

  // The sidebar keeps its order while chats run, so that what the pointer is over stays there: a chat takes its
  // place by when it was last active as this page first saw it, and moves up only when a new run starts in it.
  function stableOrder(chats) {
    for (const chat of chats) {
      const place = state.places.get(chat.uid);
      if (!place || (chat.running && !place.running)) state.places.set(chat.uid, { at: chat.updated_at, running: chat.running });
      else place.running = chat.running;
    }
    const at = (chat) => state.places.get(chat.uid).at;
    return [...chats].sort((a, b) => (at(a) < at(b) ? 1 : at(a) > at(b) ? -1 : 0));
  }

  function renderChatList() {
    const list = $("chat-list");
    const focused = list.contains(document.activeElement) ? listKey(document.activeElement) : null;
    const query = $("search").value.trim().toLowerCase();
    const byId = new Map(state.chats.map((c) => [c.uid, c]));
    const children = new Map();
    const roots = [];
    for (const chat of state.chats) {
      const parent = chat.parent_ids.length ? chat.parent_ids[chat.parent_ids.length - 1] : null;
      if (parent && byId.has(parent)) {
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(chat);
      } else {
        roots.push(chat);
      }
    }
    const matches = (chat) => !query || (chat.title || "").toLowerCase().includes(query)
      || (chat.batch_task || "").toLowerCase().includes(query) || (children.get(chat.uid) || []).some(matches);
    const batches = new Map(); // the runs of each `anges batch`, newest first, shown as one group
    for (const chat of roots) {
      if (!chat.batch_id) continue;
      if (!batches.has(chat.batch_id)) batches.set(chat.batch_id, []);
      batches.get(chat.batch_id).push(chat);
    }

    list.replaceChildren();
    let group = null;
    let groupList = null;
    let shown = 0;
    for (const chat of roots) {
      let entry = null;
      if (!chat.batch_id) {
        if (matches(chat)) entry = chatItem(chat, children, matches, 0);
      } else if (batches.get(chat.batch_id)[0] === chat) { // the group sits where its newest run would
        const runs = batches.get(chat.batch_id);
        const shownRuns = chat.batch_id.toLowerCase().includes(query) ? runs : runs.filter(matches);
        if (shownRuns.length) entry = batchItem(chat.batch_id, runs, shownRuns, children, matches, query);
      }
      if (!entry) continue;
      const label = dayLabel(state.places.get(chat.uid).at);
      if (label !== group) {
        group = label;
        list.appendChild(el("h3", "day", label));
        groupList = el("ul", "chats");
        list.appendChild(groupList);
      }
      groupList.appendChild(entry);
      shown += 1;
    }
    if (!shown) {
      list.appendChild(el("p", "muted small list-empty", query ? "No chat matches." : "No chats yet."));
    }
    rovingFocus(list, focused);
  }

  // The chat list is one stop for Tab (the current chat, else the first); the arrow keys move within it, Right and
  // Left open and close a chat's children or a batch.
  function listItems(list) {
    return [...list.querySelectorAll(".chat-link, .batch-row .tree-toggle")];
  }

  function listKey(node) {
    return node.dataset.uid ? `chat:${node.dataset.uid}` : node.closest("[data-batch]") ? `batch:${node.closest("[data-batch]").dataset.batch}` : null;
  }

  function rovingFocus(list, focused) {
    const items = listItems(list);
    for (const toggle of list.querySelectorAll(".tree-toggle")) toggle.tabIndex = -1;
    const current = items.find((item) => listKey(item) === focused) || items.find((item) => item.classList.contains("active"))
      || items[0];
    for (const item of items) item.tabIndex = item === current ? 0 : -1;
    if (current && focused) current.focus();
  }

  function onListKey(event) {
    const list = $("chat-list");
    const items = listItems(list);
    const at = items.indexOf(document.activeElement);
    if (at < 0) return;
    const toggle = document.activeElement.closest(".chat-row").querySelector(".tree-toggle");
    const expanded = toggle && toggle.getAttribute("aria-expanded") === "true";
    let next = null;
    if (event.key === "ArrowDown") next = items[Math.min(at + 1, items.length - 1)];
    else if (event.key === "ArrowUp") next = items[Math.max(at - 1, 0)];
    else if (event.key === "Home") next = items[0];
    else if (event.key === "End") next = items[items.length - 1];
    else if ((event.key === "ArrowRight" && toggle && !expanded) || (event.key === "ArrowLeft" && expanded)) {
      event.preventDefault();
      toggle.click(); // the list is drawn again, and the focus kept on the same entry
      return;
    } else return;
    event.preventDefault();
    for (const item of items) item.tabIndex = item === next ? 0 : -1;
    next.focus();
  }

  function batchItem(batchId, runs, shownRuns, children, matches, query) {
    const item = el("li", "chat-entry batch-entry");
    item.dataset.batch = batchId;
    const row = el("div", "chat-row batch-row");
    const open = Boolean(query) || state.openBatches.has(batchId);
    const toggle = el("button", "tree-toggle");
    toggle.type = "button";
    toggle.setAttribute("aria-expanded", String(open));
    toggle.setAttribute("aria-label", `${open ? "Hide" : "Show"} the runs of batch ${batchId}`);
    toggle.addEventListener("click", () => {
      if (state.openBatches.has(batchId)) state.openBatches.delete(batchId); else state.openBatches.add(batchId);
      renderChatList();
    });
    row.appendChild(toggle);
    const dot = el("span", "dot");
    const running = runs.filter((run) => run.running).length;
    if (running) dot.dataset.status = "running";
    row.appendChild(dot);
    row.appendChild(el("span", "batch-name", `Batch ${batchId}`));
    row.appendChild(el("span", "batch-count",
      `${runs.length} run${runs.length === 1 ? "" : "s"}${running ? `, ${running} running` : ""}`));
    item.appendChild(row);
    if (open) {
      const sub = el("ul", "chats children");
      for (const run of shownRuns) sub.appendChild(chatItem(run, children, matches, 1));
      item.appendChild(sub);
    }
    return item;
  }

  function chatItem(chat, children, matches, depth) {
    const item = el("li", "chat-entry");
    const row = el("div", "chat-row");
    const kids = (children.get(chat.uid) || []).filter(matches);
    if (kids.length) {
      const toggle = el("button", "tree-toggle");
      toggle.type = "button";
      const open = !state.collapsed.has(chat.uid);
      toggle.setAttribute("aria-expanded", String(open));
      toggle.setAttribute("aria-label", open ? "Hide child agents" : "Show child agents");
      toggle.addEventListener("click", () => {
        if (state.collapsed.has(chat.uid)) state.collapsed.delete(chat.uid); else state.collapsed.add(chat.uid);
        renderChatList();
      });
      row.appendChild(toggle);
    } else {
      row.appendChild(el("span", "tree-spacer"));
    }
    const link = el("a", "chat-link");
    link.href = "/chat/" + encodeURIComponent(chat.uid);
    link.dataset.uid = chat.uid;
    if (chat.uid === state.chatId) {
      link.classList.add("active");
      link.setAttribute("aria-current", "page");
    }
    const dot = el("span", "dot");
    dot.dataset.status = chat.status;
    dot.title = statusLabel(chat.status, chat.reason);
    link.appendChild(dot);
    if (chat.batch_task) link.appendChild(el("span", "chat-task", chat.batch_task));
    link.appendChild(el("span", "chat-name", chat.title || chat.uid));
    link.title = chat.parent_ids.length ? `${chat.title} (${(chat.agent_type || "agent").replace(/_/g, " ")})` : chat.title;
    link.appendChild(el("span", "chat-time", formatTime(chat.updated_at)));
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      navigate(chat.uid);
    });
    row.appendChild(link);
    item.appendChild(row);
    if (kids.length && !state.collapsed.has(chat.uid)) {
      const sub = el("ul", "chats children");
      for (const kid of kids) sub.appendChild(chatItem(kid, children, matches, depth + 1));
      item.appendChild(sub);
    }
    return item;
  }

  // -- opening a chat --------------------------------------------------------------------------------------

  function navigate(uid) {
    const path = uid ? "/chat/" + encodeURIComponent(uid) : "/";
    if (window.location.pathname !== path) window.history.pushState({ uid }, "", path);
    closeDrawer();
    if (uid) openChat(uid); else newChat();
  }

  function resetTranscript() {
    closeFeed("idle");
    state.blocks.clear();
    for (const card of state.approvals.values()) card.guard.stop();
    state.approvals.clear();
    state.live.clear();
    updateWorking();
    state.queue = [];
    state.lastIndex = -1;
    state.status = null;
    state.stopping = false;
    state.stick = true;
    state.seenUpdate = null;
    $("steps").replaceChildren();
    state.plan = null;
    showPlan();
    $("working").hidden = true;
    $("stop").hidden = true;
    $("status-batch").hidden = true;
    hideNotice();
    endRename();
  }

  function newChat() {
    resetTranscript();
    state.chatId = null;
    state.chat = null;
    state.draftSettings = {};
    document.title = "New chat · anges";
    $("chat-title").textContent = "New chat";
    $("status-line").hidden = true;
    $("empty").hidden = false;
    app.classList.add("is-draft");
    renderChatList();
    $("message").focus();
  }

  async function openChat(uid) {
    resetTranscript();
    state.chatId = uid;
    app.classList.remove("is-draft");
    $("empty").hidden = true;
    $("status-line").hidden = false;
    $("export-json").href = `/api/chats/${encodeURIComponent(uid)}/export?format=json`;
    $("export-md").href = `/api/chats/${encodeURIComponent(uid)}/export?format=md`;
    renderChatList();
    openFeed(); // at once, beside the request for the chat's details
    try {
      const data = await api("GET", `/api/chats/${encodeURIComponent(uid)}`);
      if (state.chatId !== uid) return;
      state.chat = data.chat;
      showTitle(data.chat.title);
      showBatch(data.chat);
      const parents = data.chat.parent_ids;
      const parentLink = $("parent-link");
      parentLink.hidden = !parents.length;
      if (parents.length) parentLink.href = "/chat/" + encodeURIComponent(parents[parents.length - 1]);
    } catch (err) {
      if (state.chatId !== uid) return;
      if (err.status === 404) closeFeed("idle");
      showNotice(err.status === 404 ? "This chat no longer exists." : err.message);
    }
  }

  function showBatch(chat) {
    const batch = $("status-batch");
    batch.hidden = !chat.batch_id;
    batch.textContent = chat.batch_id ? `batch ${chat.batch_id}, task ${chat.batch_task}` : "";
    if (chat.batch_id && !state.openBatches.has(chat.batch_id)) {
      state.openBatches.add(chat.batch_id); // show where this run sits in the sidebar
      renderChatList();
    }
  }

  function showTitle(title) {
    $("chat-title").textContent = title;
    document.title = `${title} · anges`;
  }

  // -- the live feed: the chat and its child agents, while a run is active, through the connection every page
  // of this browser shares (feed.js)

  function setFeedState(name) {
    app.dataset.feed = name; // idle, open or retrying; for tests and scripts
  }

  function openFeed() {
    if (!state.chatId || state.sub) return;
    const open = [];
    for (const [key, block] of state.blocks) if (!block.done) open.push(`${key}:${block.last + 1}`);
    const sub = feed.watch(state.chatId, state.lastIndex + 1, open.join(","), (name, data) => {
      if (state.sub === sub) onFeed(name, data);
    });
    state.sub = sub;
    setFeedState("open");
  }

  function onFeed(name, data) {
    if (name === "steps" || name === "child") queue(data);
    else if (name === "live") queue({ live: data });
    else if (name === "status") updateStatus(data);
    else if (name === "gone") {
      closeFeed("idle");
      showNotice("This chat was deleted.");
      refreshChats();
    } else if (name === "end") { // no run is active any more
      flush();
      for (const key of [...state.live.keys()]) dropLive(key);
      closeFeed("idle");
      endBlocks();
    }
  }

  function onHub(hub) {
    // The shared connection: up, down (retrying), refused (perhaps the session ended) or login (it did).
    if (hub === "up") showDisconnected(false);
    if (!state.sub) return;
    if (hub === "up") setFeedState("open");
    else if (hub === "login") {
      closeFeed("idle");
      checkSession();
    } else {
      setFeedState("retrying");
      checkSession(); // redirects to the login, or shows at once that the server is gone
    }
  }

  function closeFeed(next) {
    if (state.sub) feed.unwatch(state.sub);
    state.sub = null;
    setFeedState(next);
  }

  async function checkSession() {
    try { await api("GET", "/api/chats"); } catch (err) { /* api() redirects on 401 and shows the hint if down */ }
  }

  // Messages are drawn in batches, once per frame: a long chat opens with one layout, not one per step.
  function queue(message) {
    state.queue.push(message);
    if (state.flushing) return;
    state.flushing = true;
    if (document.hidden) setTimeout(flush, 50); else requestAnimationFrame(flush);
  }

  function flush() {
    state.flushing = false;
    if (!state.queue.length) return;
    const messages = state.queue;
    state.queue = [];
    const main = document.createDocumentFragment();
    for (const message of messages) {
      if (message.steps) addSteps(message.block, message.steps, main);
      else if (message.live) showLive(message.live, main);
      else updateChild(message);
    }
    $("steps").appendChild(main);
    if (state.stick) scrollToBottom();
  }

  // The analysis, reasoning and answer of a reply as it streams, as plain text; its step takes its place.
  function showLive(live, main) {
    const block = live.block ? state.blocks.get(live.block) : null;
    if (live.block && (!block || block.done)) return;
    let item = state.live.get(live.block);
    if (!item) {
      item = el("li", "step step-live");
      item.appendChild(el("div", "live-text"));
      state.live.set(live.block, item);
    }
    item.firstChild.textContent = [live.analysis, live.reasoning].filter((text) => text && text.trim()).join("\n\n");
    if (live.answer) showLiveAnswer(item, live.answer_type, live.answer);
    if (live.output) showLiveOutput(item, live.output);
    (block ? block.list : main).appendChild(item);
  }

  function showLiveAnswer(item, type, text) {
    let card = item.querySelector(".live-answer");
    if (!card) {
      card = el("div", "card answer live-answer");
      card.dataset.type = type;
      card.appendChild(el("div", "answer-label", ANSWER_LABELS[LIVE_ANSWER_TYPES[type]] || "Answer"));
      card.appendChild(el("div", "answer-body live-answer-text"));
      item.appendChild(card);
    }
    card.lastChild.textContent = text;
  }

  // The latest output of the command the reply runs, as plain text, scrolled to its end.
  function showLiveOutput(item, text) {
    let box = item.querySelector(".live-output");
    if (!box) {
      box = el("pre", "live-output");
      item.appendChild(box);
    }
    box.textContent = text;
    box.scrollTop = box.scrollHeight;
  }

  function dropLive(key) {
    const item = state.live.get(key);
    if (item) item.remove();
    state.live.delete(key);
  }

  function addSteps(key, steps, main) {
    dropLive(key);
    if (!key) {
      for (const step of steps) {
        if (step.index <= state.lastIndex) continue; // never show a step twice
        state.lastIndex = step.index;
        const item = renderStep(step, "");
        if (item) main.appendChild(item);
        if (step.kind === "plan") state.plan = step;
        // a new request ends a finished plan (one with open steps goes on, as the agent's prompt shows it)
        else if (step.kind === "request" && state.plan && state.plan.done === state.plan.total) state.plan = null;
      }
      showPlan();
      return;
    }
    const block = state.blocks.get(key);
    if (!block) return;
    for (const step of steps) {
      if (block.done || step.index <= block.last) continue; // a block shows one run of the child: up to its return
      block.last = step.index;
      const item = renderStep(step, key);
      if (item) block.list.appendChild(item);
      if (step.kind === "plan") block.progress.textContent = `plan: ${step.done} of ${step.total} steps done`;
      if (RETURN_TYPES.has(step.type)) {
        block.done = true;
        showBlockStatus(block, RETURN_STATUS[step.type]);
      }
    }
  }

  function updateChild(message) {
    const block = state.blocks.get(message.block);
    if (!block) return;
    block.name.textContent = message.status === "deleted" ? `${block.uid} (deleted)` : message.title || block.uid;
    if (message.status === "deleted") block.done = true;
    else if (!block.done) showBlockStatus(block, message.status);
  }

  function endBlocks() {
    // The chat's run is over; a child block that never returned was cut short with it.
    for (const block of state.blocks.values()) {
      if (!block.done && block.pill.dataset.status === "running") showBlockStatus(block, "interrupted");
      block.done = true;
    }
  }

  function showBlockStatus(block, status) {
    block.pill.dataset.status = status;
    block.pill.textContent = STATUS_LABELS[status] || status;
  }

  function nearBottom() {
    const box = $("transcript");
    return box.scrollHeight - box.scrollTop - box.clientHeight < 160;
  }

  function scrollToBottom() {
    const box = $("transcript");
    box.scrollTop = box.scrollHeight;
    state.scrollTop = box.scrollTop;
  }

  // The view follows new steps while it is at the bottom. Off-screen steps get their real height only when
  // they come into view (see .step in the CSS), so the bottom moves after a scroll: follow it.
  function watchScrolling() {
    const box = $("transcript");
    state.scrollTop = box.scrollTop;
    box.addEventListener("scroll", () => {
      if (nearBottom()) state.stick = true;
      else if (box.scrollTop < state.scrollTop - 2) state.stick = false; // the reader went up
      state.scrollTop = box.scrollTop;
    }, { passive: true });
    new ResizeObserver(() => { if (state.stick) scrollToBottom(); }).observe($("steps"));
  }

  function updateStatus(status) {
    const before = state.status;
    state.status = status;
    showRunState(status);
    $("status-steps").textContent = `${status.steps} step${status.steps === 1 ? "" : "s"}`;
    const tokens = status.input_tokens + status.output_tokens;
    const cached = status.cached_tokens ? ` (${Math.round(status.cache_hit_ratio * 100)}% of input cached)` : "";
    $("status-tokens").textContent = `${formatNumber(tokens)} tokens${cached}`;
    $("status-tokens").title = `${status.input_tokens} in (${status.cached_tokens || 0} from the cache), ` +
      `${status.output_tokens} out`;
    $("status-cost").textContent = status.cost === null || status.cost === undefined ? "" : `$${status.cost.toFixed(4)}`;
    $("status-model").textContent = status.model || "";
    $("stop").disabled = false;
    if (!status.running && state.stopping) {
      state.stopping = false;
      hideNotice(); // "Stopping the run…" has done its job: the run shows how it ended
    }
    if (!before || before.running !== status.running) {
      flush(); // the steps that came before this status (a decision, say) are drawn first
      refreshApprovalCards();
    }
    if (status.title && (!before || before.title !== status.title)) showTitle(status.title);
    if (!before || before.status !== status.status || before.title !== status.title) refreshChats();
    if (status.running && state.stick) scrollToBottom();
  }

  // -- rendering steps -------------------------------------------------------------------------------------

  function renderStep(step, key) {
    const item = el("li", `step step-${step.kind}`);
    item.dataset.index = step.index;
    item.dataset.type = step.type;
    if (step.number) { // the number the agent, /steps, anges diff and the restore dialog give this step
      const number = el("span", "step-number", `#${step.number}`);
      number.title = `Step ${step.number}`;
      item.appendChild(number);
    }
    if (step.kind === "request") {
      item.appendChild(el("div", "step-label", step.from_parent ? "Task from the parent agent" : "You"));
      item.appendChild(el("div", "request-text", step.text));
      return item;
    }
    if (step.kind === "child_running") return renderChild(step, item, key);
    if (step.kind === "approval") return renderApproval(step, item);
    // An answer speaks for itself; a child's exit repeats the reasoning of the call that started it.
    if (step.reasoning_html && step.kind !== "answer" && step.kind !== "child_exit") {
      const reasoning = el("div", "reasoning md");
      setSafeHTML(reasoning, step.reasoning_html);
      item.appendChild(reasoning);
    }
    if (step.analysis_html) {
      const details = el("details", "analysis");
      details.appendChild(el("summary", null, "Analysis"));
      const body = el("div", "md");
      setSafeHTML(body, step.analysis_html);
      details.appendChild(body);
      item.appendChild(details);
    }
    const render = { shell: renderShell, api: renderApi, edit: renderEdit, answer: renderAnswer,
      interrupted: renderInterrupted, child_start: renderChildNote, child_exit: renderChildNote, hook: renderHook,
      plan: renderPlan, held: renderHeld, rejected: renderNote }[step.kind] || renderOther;
    item.appendChild(render(step));
    if (step.restorable && !key) item.appendChild(restoreButton(step));
    return item;
  }

  // -- restoring the files to before a step (checkpoints) ----------------------------------------------------

  function restoreButton(step) {
    const button = el("button", "btn btn-ghost step-restore", "Restore to before this step");
    button.type = "button";
    button.title = "Put the working directory's files back as they were before this step (shows the diff first)";
    button.addEventListener("click", () => openRestore(step.number));
    return button;
  }

  async function openRestore(number) {
    if (state.status && state.status.running) { showNotice("Stop the run before restoring its files."); return; }
    let plan;
    try {
      plan = await api("GET", `/api/chats/${encodeURIComponent(state.chatId)}/restore?step=${number}`);
    } catch (err) {
      showNotice(err.message);
      return;
    }
    state.restorePlan = plan;
    const steps = plan.steps.length === 1 ? `step ${plan.steps[0]}` : `steps ${plan.steps.join(", ")}`;
    $("restore-summary").textContent = plan.files.length
      ? `Back to before step ${plan.step} (${plan.label}), taking back ${steps}: ${plan.stat}.`
      : `Nothing to restore: the files are as they were before step ${plan.step}.`;
    const notes = $("restore-notes");
    notes.replaceChildren();
    for (const item of plan.left_alone) notes.appendChild(el("li", null, `Left as it is: ${item.path} (${item.why})`));
    if (plan.outside.length) {
      notes.appendChild(el("li", null, `Step ${plan.outside.join(", ")} could change files outside the working ` +
        "directory (outside the sandbox, an MCP tool, a web API call or a plug-in): those changes stay."));
    }
    for (const item of plan.conflicts) notes.appendChild(el("li", "conflict", `${item.path}: ${item.why}`));
    const diff = $("restore-diff");
    diff.replaceChildren();
    if (plan.diff) diff.appendChild(diffPre(plan.diff + (plan.diff_cut ? "\n(the middle of the diff is not shown)" : "")));
    diff.hidden = !plan.diff;
    $("restore-overwrite").checked = false;
    $("restore-overwrite-row").hidden = !plan.conflicts.length;
    $("restore-confirm").disabled = !plan.files.length;
    $("restore-error").hidden = true;
    $("restore").showModal();
  }

  async function confirmRestore(event) {
    event.preventDefault();
    const plan = state.restorePlan;
    if (!plan) return;
    const overwrite = $("restore-overwrite").checked;
    if (plan.conflicts.length && !overwrite) {
      $("restore-error").textContent = "Someone else changed the files marked above since that step: tick the box " +
        "to replace them, or cancel.";
      $("restore-error").hidden = false;
      return;
    }
    $("restore-confirm").disabled = true;
    try {
      const done = await api("POST", `/api/chats/${encodeURIComponent(state.chatId)}/restore`,
        { step: plan.step, token: plan.token, overwrite });
      $("restore").close();
      showNotice(`Files restored: ${done.stat}.`, "info");
      openFeed(); // the chat records the restore: show it
    } catch (err) {
      $("restore-error").textContent = err.message;
      $("restore-error").hidden = false;
      $("restore-confirm").disabled = false;
    }
  }

  function cardHead(className) {
    return el("div", `card-head ${className || ""}`.trim());
  }

  function outputBlock(text, long, label) {
    const pre = el("pre", "output", text);
    const wrap = el("div", "codeblock");
    wrap.appendChild(pre);
    wrap.appendChild(copyButton(() => text, "Copy output"));
    if (!long) return wrap;
    const details = el("details", "long-output");
    details.appendChild(el("summary", null, label));
    details.appendChild(wrap);
    return details;
  }

  function renderShell(step) {
    const card = el("div", "card shell");
    const head = cardHead();
    head.appendChild(el("span", "prompt", "$"));
    head.appendChild(el("code", "command", step.command));
    const badges = el("span", "badges");
    if (step.timed_out) badges.appendChild(el("span", "badge bad", "timed out"));
    else if (step.interrupted) badges.appendChild(el("span", "badge bad", "killed"));
    else if (step.background) {
      const badge = el("span", "badge", step.yielded ? "still running" : "background");
      if (step.yielded) badge.title = "Still running at its yield point, it went on in the background";
      badges.appendChild(badge);
    }
    else if (step.exit_code !== null && step.exit_code !== undefined) {
      badges.appendChild(el("span", `badge ${step.exit_code === 0 ? "ok" : "bad"}`, `exit ${step.exit_code}`));
    }
    if (typeof step.duration === "number") badges.appendChild(el("span", "badge", `${step.duration.toFixed(1)} s`));
    if (step.escalated) badges.appendChild(el("span", "badge warn", "outside the sandbox"));
    else if (step.sandbox === "none") badges.appendChild(el("span", "badge warn", "no sandbox"));
    addApprovedBadge(badges, step);
    head.appendChild(badges);
    head.appendChild(copyButton(() => step.command, "Copy command"));
    card.appendChild(head);
    const text = step.output.replace(/\n+$/, "");
    if (text) {
      const lines = text.split("\n").length;
      card.appendChild(outputBlock(text, step.long, `Output (${lines} lines)`));
    } else {
      card.appendChild(el("div", "no-output muted small", "(no output)"));
    }
    return card;
  }

  // A web API call anges made (CALL_API): the method and URL, how it went, the body as the model read it.
  function renderApi(step) {
    const card = el("div", "card api");
    const head = cardHead();
    head.appendChild(el("span", "prompt", "\u21c4"));
    const name = step.api ? `${step.api}.${step.operation}` : step.operation;
    head.appendChild(el("code", "command", step.sent ? `${step.method} ${step.url}` : name));
    const badges = el("span", "badges");
    badges.appendChild(el("span", `badge ${step.ok ? "ok" : "bad"}`, step.outcome));
    if (typeof step.duration === "number") badges.appendChild(el("span", "badge", `${step.duration.toFixed(2)} s`));
    addApprovedBadge(badges, step);
    head.appendChild(badges);
    card.appendChild(head);
    if (step.message) card.appendChild(el("div", "small muted", step.message));
    const text = (step.output || "").replace(/\n+$/, "");
    if (text) card.appendChild(outputBlock(text, step.long, `Body (${text.split("\n").length} lines)`));
    else card.appendChild(el("div", "no-output muted small", "(no body)"));
    if (step.body_path) card.appendChild(el("div", "small muted", `Whole body: ${step.body_path}`));
    return card;
  }

  // A step the policy wanted approved that ran without a card: an earlier "Always" (or approval: auto) let it.
  const APPROVED_BADGES = {
    always: ["approved: always", "Run without asking: an earlier \u201cAlways\u201d approved it for the rest of this run"],
    auto: ["approved: auto", "Run without asking: approval is auto for this chat's runs"],
  };

  function addApprovedBadge(badges, step) {
    const badge = APPROVED_BADGES[step.approved_by];
    if (!badge) return;
    const node = el("span", "badge approved", badge[0]);
    node.title = badge[1];
    badges.appendChild(node);
  }

  function renderEdit(step) {
    const card = el("div", "card edit");
    const head = cardHead();
    head.appendChild(el("span", "edit-label", step.error ? "Edit failed" : "Edited"));
    head.appendChild(el("code", "path", step.path || step.directive));
    const badges = el("span", "badges");
    if (step.error) badges.appendChild(el("span", "badge bad", "not changed"));
    if (step.lines_added) badges.appendChild(el("span", "badge ok", `+${step.lines_added}`));
    if (step.lines_removed) badges.appendChild(el("span", "badge bad", `\u2212${step.lines_removed}`));
    addApprovedBadge(badges, step);
    head.appendChild(badges);
    card.appendChild(head);
    if (step.error) {
      card.appendChild(el("pre", "output", step.text));
      return card;
    }
    const pre = diffPre(step.diff);
    const lines = step.diff.split("\n").length;
    const wrap = el("div", "codeblock");
    wrap.appendChild(pre);
    wrap.appendChild(copyButton(() => step.diff, "Copy diff"));
    if (lines > 40) {
      const details = el("details", "long-output");
      details.appendChild(el("summary", null, `Diff (${lines} lines)`));
      details.appendChild(wrap);
      card.appendChild(details);
    } else {
      card.appendChild(wrap);
    }
    return card;
  }

  function diffPre(diff) {
    const pre = el("pre", "diff");
    for (const line of diff.replace(/\n$/, "").split("\n")) {
      let cls = "";
      if (line.startsWith("+++") || line.startsWith("---")) cls = "meta";
      else if (line.startsWith("@@")) cls = "hunk";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      pre.appendChild(el("span", cls ? `line ${cls}` : "line", line + "\n"));
    }
    return pre;
  }

  function renderAnswer(step) {
    const card = el("div", `card answer answer-${step.type}`);
    card.appendChild(el("div", "answer-label", ANSWER_LABELS[step.type] || "Answer"));
    const body = el("div", "md answer-body");
    setSafeHTML(body, step.body_html);
    card.appendChild(body);
    return card;
  }

  function renderInterrupted(step) {
    const card = el("div", "card interrupted");
    const label = step.reason === "interrupt" ? "Stopped" : "The run stopped";
    card.appendChild(el("div", "answer-label", label));
    card.appendChild(el("div", "interrupted-text", step.text));
    return card;
  }

  function renderNote(step) { // one line of the run's own: "reply rejected: ... (asked again)"
    return el("div", "step-note", step.text);
  }

  function renderChildNote(step) {
    const note = el("div", "child-note");
    const child = step.child || {};
    const who = (child.agent_type || "child agent").replace(/_/g, " ");
    if (step.kind === "child_start") {
      note.textContent = `${step.type === "resume_child_agent" ? "Resuming" : "Delegating to"} ${who}`;
    } else {
      const outcome = STATUS_LABELS[RETURN_STATUS[child.exit_type]] || "finished";
      note.textContent = `${who.charAt(0).toUpperCase()}${who.slice(1)} returned: ${outcome.toLowerCase()}`;
      note.title = step.text;
    }
    return note;
  }

  // -- the plan: a card per update in the transcript, and the chat's latest in the panel above it ----------------

  const PLAN_MARKS = { completed: "\u2713", in_progress: "\u25B8", pending: "\u25CB" };

  function planItems(plan) {
    return plan.map((item) => {
      const entry = el("li", "plan-step", `${PLAN_MARKS[item.status] || PLAN_MARKS.pending} ${item.step}`);
      entry.dataset.status = item.status;
      return entry;
    });
  }

  function renderPlan(step) {
    const card = el("div", "card plan");
    const head = cardHead();
    head.appendChild(el("span", "edit-label", "Plan"));
    head.appendChild(el("span", "muted", `${step.done} of ${step.total} steps done`));
    card.appendChild(head);
    const list = el("ol", "plan-steps");
    list.replaceChildren(...planItems(step.plan));
    card.appendChild(list);
    return card;
  }

  function showPlan() {
    const plan = state.plan;
    $("plan-panel").hidden = !plan || !plan.total;
    if (!plan) return;
    $("plan-progress").textContent = `${plan.done} of ${plan.total} steps done`;
    $("plan-steps").replaceChildren(...planItems(plan.plan));
  }

  function renderHeld(step) {
    const card = el("div", "card held");
    card.appendChild(el("div", "answer-label", step.type === "completion_dropped"
      ? "Completion dropped: an action of the reply failed" : "Completion held for a check"));
    const causes = el("ul", "held-causes");
    for (const cause of step.causes.length ? step.causes : [step.text]) causes.appendChild(el("li", null, cause));
    card.appendChild(causes);
    return card;
  }

  function renderOther(step) {
    const card = el("div", "card other");
    const head = cardHead();
    head.appendChild(el("span", "edit-label", step.type.replace(/_/g, " ")));
    const badges = el("span", "badges");
    addApprovedBadge(badges, step);
    head.appendChild(badges);
    card.appendChild(head);
    if (step.text) card.appendChild(outputBlock(step.text, step.text.split("\n").length > 20, "Details"));
    return card;
  }

  // -- a hook's run: which hook, on what, its outcome and time; why it blocked, what it told the model ----------

  const HOOK_OUTCOMES = { ok: ["ok", "ok"], blocked: ["blocked", "warn"], failed: ["failed", "bad"],
    timeout: ["timed out", "bad"], stopped: ["stopped", "warn"], unreadable: ["unreadable answer", "bad"] };

  function renderHook(step) {
    const facts = step.hook || {};
    const card = el("div", `card hook hook-${facts.effect || "none"}`);
    const head = cardHead();
    head.appendChild(el("span", "hook-label", "Hook"));
    head.appendChild(el("code", "command", facts.hook || ""));
    const on = [facts.hook_event, facts.on_action, facts.on_action ? facts.subject : ""].filter(Boolean).join(" ");
    head.appendChild(el("span", "hook-on muted small", on));
    const badges = el("span", "badges");
    const [word, tone] = HOOK_OUTCOMES[facts.outcome] || [facts.outcome || "?", ""];
    if (facts.effect === "blocked") {
      const what = facts.hook_event === "before_complete" ? "sent back" : facts.hook_event === "request" ? "refused" : "blocked";
      badges.appendChild(el("span", "badge warn", facts.outcome === "blocked" ? what : `${word}: ${what}`));
    } else {
      badges.appendChild(el("span", `badge ${tone}`, word));
      if (facts.effect === "context") badges.appendChild(el("span", "badge approved", "told the model"));
    }
    if (typeof facts.duration === "number") badges.appendChild(el("span", "badge", `${facts.duration.toFixed(1)} s`));
    head.appendChild(badges);
    card.appendChild(head);
    const said = facts.outcome === "ok" ? facts.context : facts.reason;
    if (said) card.appendChild(el("p", "hook-said", said));
    if (facts.output) card.appendChild(outputBlock(facts.output, true, "What it printed"));
    return card;
  }

  function renderChild(step, item, parentKey) {
    const uid = step.child && step.child.uid;
    const details = el("details", "child");
    details.open = true;
    const summary = el("summary", "child-head");
    summary.appendChild(el("span", "child-label", "Child agent"));
    const name = el("span", "child-name", uid || "unknown");
    summary.appendChild(name);
    const pill = el("span", "pill small", "");
    summary.appendChild(pill);
    const progress = el("span", "child-progress muted small", "");
    summary.appendChild(progress);
    if (uid) {
      const open = el("a", "child-open", "Open");
      open.href = "/chat/" + encodeURIComponent(uid);
      open.addEventListener("click", (event) => {
        if (event.metaKey || event.ctrlKey) return;
        event.preventDefault();
        navigate(uid);
      });
      summary.appendChild(open);
    }
    details.appendChild(summary);
    const list = el("ol", "steps child-steps");
    details.appendChild(list);
    item.appendChild(details);
    // The page's feed sends this child's steps under the block's key (see web/feed.py).
    const block = { list, pill, name, progress, uid, last: ((step.child && step.child.starting_from) || 0) - 1,
      done: !uid };
    state.blocks.set(parentKey ? `${parentKey}/${step.index}` : String(step.index), block);
    showBlockStatus(block, "running");
    return item;
  }

  // -- approvals: a card per request, answered from any tab; the stream says when it is decided -------------

  const ANSWERED_BY = { web: "in the web chat", terminal: "in the terminal", editor: "in the editor",
    limit: "as too long to be shown whole",
    always: "by an earlier \u201calways\u201d", auto: "automatically (approval: auto)", rule: "by a rule" };

  function renderApproval(step, item) {
    const facts = step.approval || {};
    if (step.type === "approval_decided") {
      const card = facts.request_id && state.approvals.get(facts.request_id);
      if (card) { // the answer to a card on the page: the card shows it, no step of its own
        showDecision(card, facts);
        return null;
      }
      item.appendChild(renderDecisionNote(step, facts));
      return item;
    }
    item.appendChild(renderApprovalCard(facts));
    return item;
  }

  function renderApprovalCard(facts) {
    const node = el("div", "card approval");
    node.dataset.requestId = facts.request_id || "";
    const head = cardHead();
    head.appendChild(el("span", "approval-label", "Needs approval"));
    // One line, marked by the server (safety/approval_text.py: title): the whole of it is in the body below.
    const title = el("code", "path", facts.title || facts.action_type || "");
    title.title = title.textContent;
    head.appendChild(title);
    if (facts.escalate) {
      const badges = el("span", "badges");
      badges.appendChild(el("span", "badge warn", "outside the sandbox"));
      head.appendChild(badges);
    }
    node.appendChild(head);
    const body = el("div", "approval-body");
    // What the agent thinks it is doing, while a person decides; its step shows it once the answer is in.
    if (facts.reasoning) body.appendChild(el("p", "approval-reasoning", facts.reasoning));
    const why = el("p", "approval-reason", facts.reason || "");
    why.appendChild(el("span", "muted", ` [${facts.rule || "?"}]`));
    body.appendChild(why);
    // What runs, every unseen character marked by the server; a detail too long for the card shows its head and
    // tail, and Approve waits until the person has opened all of it (as the terminal's `v`).
    const detail = facts.detail || "";
    const wrap = el("div", "codeblock");
    const detailPre = (text) => {
      const firstBreak = text.indexOf("\n");
      return facts.action_type === "EDIT_FILE" && firstBreak > 0
        ? diffPre(text.slice(firstBreak + 1)) : el("pre", "output", text);
    };
    wrap.appendChild(detailPre(facts.complete === false ? facts.shown || "" : detail));
    wrap.appendChild(copyButton(() => detail, "Copy"));
    body.appendChild(wrap);
    const size = el("p", "approval-size muted small", facts.size || "");
    body.appendChild(size);
    if (facts.complete === false) {
      size.textContent += facts.detail_cut ? " \u2014 too long to approve here" : " \u2014 only part of it is shown";
      if (!facts.detail_cut) {
        const openAll = el("button", "btn btn-small approval-open", "Show all of it");
        openAll.type = "button";
        openAll.addEventListener("click", () => {
          wrap.replaceChild(detailPre(detail), wrap.firstChild);
          size.textContent = facts.size || "";
          openAll.remove();
          card.seen = true;
          card.guard.restart(); // Approve appears now: it waits its own read time
          setCardState(card, card.state);
        });
        body.appendChild(openAll);
      }
    }
    if (facts.escalate) {
      const asked = facts.action_type !== "TRUST"; // a trust question is anges', not the agent's
      const note = el("p", "approval-escalate",
        `${facts.escalation_note || "If approved, this runs outside the sandbox."}${asked ? " The agent says why: " : ""}`);
      note.dataset.asked = asked ? "agent" : "";
      if (asked) note.appendChild(el("q", null, facts.justification || "(no reason given)"));
      body.appendChild(note);
    }
    node.appendChild(body);

    const controls = el("div", "approval-controls");
    const feedback = el("textarea", "approval-feedback");
    feedback.rows = 1;
    feedback.maxLength = 2000;
    feedback.placeholder = "Tell the agent why (optional, sent with Deny)";
    feedback.setAttribute("aria-label", "Tell the agent why");
    controls.appendChild(feedback);
    const buttons = el("div", "approval-buttons");
    const button = (label, className, decision, title) => {
      const b = el("button", `btn btn-small ${className}`, label);
      b.type = "button";
      b.dataset.decision = decision;
      if (title) b.title = title;
      b.addEventListener("click", (event) => { if (card.guard.takes(b, event)) answerApproval(card, decision); });
      buttons.appendChild(b);
      return b;
    };
    const card = { id: facts.request_id, uid: facts.agent_id, channel: facts.channel || "", node, feedback,
      outcome: el("p", "approval-outcome"), state: "pending", buttons: [], approving: [],
      seen: facts.complete !== false };
    card.approving.push(button("Approve", "btn-primary", "allow", "Run it this once"));
    card.approving.push(button("Always", "", "always", `Run it, and for the rest of this run: ${facts.scope || ""}`));
    card.buttons.push(...card.approving);
    card.buttons.push(button("Deny", "btn-danger", "deny", "Do not run it; the agent gets what you typed above"));
    // Only a deliberate act answers (deliberate.js): the buttons work once the card has been read.
    card.guard = new window.AngesDeliberate.Guard(buttons, card.buttons, (facts.read_seconds ?? 1) * 1000,
      () => setCardState(card, card.state),
      (why) => setCardState(card, card.state, `Not taken: ${why}. Read the card, then press the button again.`));
    controls.appendChild(buttons);
    node.appendChild(controls);
    card.outcome.setAttribute("role", "status");
    node.appendChild(card.outcome);
    if (card.channel !== "web") {
      controls.hidden = true;
      const where = { terminal: "the terminal", editor: "the editor" }[card.channel]
        || `the ${card.channel || "other"} channel`;
      card.outcome.textContent = `Waiting for an answer in ${where}, where this run was started.`;
    }
    if (card.id) state.approvals.set(card.id, card);
    setCardState(card, "pending");
    return node;
  }

  function setCardState(card, name, message) {
    card.state = name;
    card.node.dataset.state = name;
    const running = Boolean(state.status && state.status.running);
    const open = (name === "pending" || name === "error") && running && card.channel === "web";
    if (!["pending", "sending", "sent", "error"].includes(name)) card.guard.stop();
    const ready = open && card.guard.armed;
    for (const b of card.buttons) b.disabled = !ready;
    for (const b of card.approving) {
      b.hidden = !card.seen; // offered only once all of it has been on the page
      b.disabled = !ready || !card.seen;
    }
    card.node.dataset.ready = String(ready);
    card.feedback.disabled = !open;
    if (message !== undefined) card.outcome.textContent = message;
    updateWorking();
  }

  async function answerApproval(card, decision) {
    if (card.state !== "pending" && card.state !== "error") return;
    const feedback = decision === "deny" ? card.feedback.value.trim() : "";
    setCardState(card, "sending", "Sending your answer\u2026");
    try {
      await api("POST", `/api/chats/${encodeURIComponent(card.uid)}/approvals/${encodeURIComponent(card.id)}`,
        { decision, feedback });
      if (card.state === "sending") setCardState(card, "sent", "Answer sent: the agent goes on in a moment.");
    } catch (err) {
      if (card.state !== "sending") return; // the decision arrived meanwhile
      // 409: answered elsewhere, or the run ended; the stream shows which in a moment.
      setCardState(card, err.status === 409 ? "sent" : "error", err.message);
    }
  }

  function showDecision(card, facts) {
    const who = ANSWERED_BY[facts.by] || `by ${facts.by}`;
    let text;
    if (facts.decision === "allow") {
      text = `Approved ${who}` + (facts.always ? ", and for the rest of this run." : ".");
    } else if (facts.decision === "cancelled") {
      text = "Cancelled: the run stopped before an answer.";
    } else {
      text = `Denied ${who}.` + (facts.feedback ? ` The agent was told: \u201c${facts.feedback}\u201d` : "");
    }
    card.node.querySelector(".approval-label").textContent =
      { allow: "Approved", deny: "Denied", cancelled: "Not answered" }[facts.decision] || "Decided";
    const note = card.node.querySelector(".approval-escalate");
    const said = note && note.dataset.asked ? " The agent said why: " : "";
    if (note && facts.decision === "allow") note.firstChild.textContent = `Approved: it runs outside the sandbox.${said}`;
    else if (note) note.firstChild.textContent = `Not approved: it does not leave the sandbox.${said}`;
    card.node.querySelector(".approval-controls").hidden = true;
    card.node.querySelector(".approval-reasoning")?.remove();
    setCardState(card, facts.decision, text);
  }

  function renderDecisionNote(step, facts) {
    // A decision nobody was asked about (a rule, approval: auto or deny, no one to ask), or one whose card is gone.
    const card = el("div", `card approval decided`);
    card.dataset.state = facts.decision || "";
    const head = cardHead();
    const label = facts.decision === "allow" ? "Approved" : facts.decision === "cancelled" ? "Not answered" : "Declined";
    head.appendChild(el("span", "approval-label", label));
    head.appendChild(el("code", "path", facts.title || facts.action_type || ""));
    card.appendChild(head);
    card.appendChild(el("p", "approval-outcome", step.message || ""));
    if (facts.reason) card.appendChild(el("p", "approval-reason muted small", `${facts.reason} [${facts.rule}]`));
    return card;
  }

  function refreshApprovalCards() {
    // The run ended: a card still waiting will not get an answer. Otherwise (re)open the buttons as it runs.
    const running = Boolean(state.status && state.status.running);
    for (const card of state.approvals.values()) {
      if (["pending", "sending", "sent", "error"].includes(card.state)) {
        if (running) setCardState(card, card.state);
        else {
          card.node.querySelector(".approval-controls").hidden = true;
          setCardState(card, "ended", "Not answered: the run ended.");
        }
      }
    }
  }

  function updateWorking() {
    const waiting = [...state.approvals.values()].some((card) => ["pending", "sending", "sent", "error"].includes(card.state));
    $("working-text").textContent = waiting ? "Waiting for approval\u2026" : "Working\u2026";
  }

  // -- sending, stopping, settings -------------------------------------------------------------------------

  async function send() {
    const box = $("message");
    const text = box.value;
    if (!text.trim()) return;
    const button = $("send");
    button.disabled = true;
    try {
      if (!state.chatId) {
        const data = await api("POST", "/api/chats", { text, settings: state.draftSettings });
        box.value = "";
        hideNotice();
        await refreshChats();
        navigate(data.chat.uid);
      } else {
        await api("POST", `/api/chats/${encodeURIComponent(state.chatId)}/messages`, { text });
        box.value = "";
        hideNotice();
        openFeed(); // the feed closed when the last run ended
      }
    } catch (err) {
      showNotice(`Not sent: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  }

  async function stop() {
    if (!state.chatId) return;
    $("stop").disabled = true;
    try {
      await api("POST", `/api/chats/${encodeURIComponent(state.chatId)}/stop`);
      if (state.status && state.status.running) {
        state.stopping = true;
        showNotice("Stopping the run\u2026", "info");
      }
    } catch (err) {
      showNotice(err.message);
      $("stop").disabled = false;
    }
  }

  function currentSettings() {
    if (state.chat) return state.chat.settings;
    return Object.assign({ agent_type: "default", model: "", cmd_init_dir: "", prefix_cmd: "", notes: [], mcp_config: "" },
      state.draftSettings);
  }

  function openSettings() {
    const s = currentSettings();
    $("set-agent-type").value = s.agent_type || "default";
    $("set-model").value = s.model || "";
    $("set-dir").value = s.cmd_init_dir || "";
    $("set-prefix").value = s.prefix_cmd || "";
    $("set-mcp").value = s.mcp_config || "";
    $("set-notes").value = (s.notes || []).join("\n");
    $("settings-error").hidden = true;
    $("settings").showModal();
  }

  async function saveSettings(event) {
    event.preventDefault();
    const settings = {
      agent_type: $("set-agent-type").value,
      model: $("set-model").value.trim(),
      cmd_init_dir: $("set-dir").value.trim(),
      prefix_cmd: $("set-prefix").value,
      mcp_config: $("set-mcp").value.trim(),
      notes: $("set-notes").value.split("\n").map((n) => n.trim()).filter(Boolean),
    };
    if (!settings.cmd_init_dir) delete settings.cmd_init_dir;
    try {
      if (state.chatId) {
        const data = await api("PATCH", `/api/chats/${encodeURIComponent(state.chatId)}`, { settings });
        state.chat = data.chat;
      } else {
        await api("POST", "/api/settings/check", { settings });
        state.draftSettings = settings;
        if (settings.cmd_init_dir) $("empty-dir").textContent = settings.cmd_init_dir;
      }
      $("settings").close();
    } catch (err) {
      const box = $("settings-error");
      box.textContent = err.message;
      box.hidden = false;
    }
  }

  function startRename() {
    if (!state.chatId) return;
    $("rename-input").value = $("chat-title").textContent;
    $("chat-title").hidden = true;
    $("rename-form").hidden = false;
    $("rename-input").focus();
    $("rename-input").select();
  }

  function endRename() {
    $("rename-form").hidden = true;
    $("chat-title").hidden = false;
  }

  async function saveRename(event) {
    event.preventDefault();
    const title = $("rename-input").value.trim();
    if (!title) return;
    try {
      const data = await api("PATCH", `/api/chats/${encodeURIComponent(state.chatId)}`, { title });
      state.chat = data.chat;
      showTitle(data.chat.title);
      showBatch(data.chat);
      endRename();
      refreshChats();
    } catch (err) {
      showNotice(err.message);
    }
  }

  function askDelete() {
    if (!state.chatId) return;
    $("delete-name").textContent = $("chat-title").textContent;
    $("confirm-delete").showModal();
  }

  async function deleteChat() {
    const uid = state.chatId;
    try {
      await api("DELETE", `/api/chats/${encodeURIComponent(uid)}`);
      await refreshChats();
      navigate(null);
    } catch (err) {
      showNotice(err.message);
    }
  }

  // -- the drawer (phones) ---------------------------------------------------------------------------------

  function openDrawer() {
    app.classList.add("drawer-open");
    $("backdrop").hidden = false;
    $("menu").setAttribute("aria-expanded", "true");
    $("new-chat").focus();
  }

  function closeDrawer() {
    const inside = $("sidebar").contains(document.activeElement);
    app.classList.remove("drawer-open");
    $("backdrop").hidden = true;
    $("menu").setAttribute("aria-expanded", "false");
    if (inside && getComputedStyle($("menu")).display !== "none") $("menu").focus(); // not lost in a hidden drawer
  }

  // -- the chat's actions (on a phone: behind one button) ---------------------------------------------------

  function showActions(open) {
    document.querySelector(".topbar").classList.toggle("actions-open", open);
    $("more").setAttribute("aria-expanded", String(open));
  }

  // -- wiring ----------------------------------------------------------------------------------------------

  $("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("message").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (ENTER_SENDS || event.ctrlKey || event.metaKey) {
      event.preventDefault();
      send();
    }
  });
  if (!ENTER_SENDS) $("message").placeholder = "Message the agent";
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => navigate(null));
  $("search").addEventListener("input", renderChatList);
  $("settings-open").addEventListener("click", openSettings);
  $("settings-form").addEventListener("submit", saveSettings);
  $("settings-cancel").addEventListener("click", () => $("settings").close());
  $("rename").addEventListener("click", startRename);
  $("rename-form").addEventListener("submit", saveRename);
  $("rename-cancel").addEventListener("click", endRename);
  $("rename-input").addEventListener("keydown", (event) => { if (event.key === "Escape") endRename(); });
  $("delete").addEventListener("click", askDelete);
  $("restore-form").addEventListener("submit", confirmRestore);
  $("restore-cancel").addEventListener("click", () => $("restore").close());
  $("confirm-delete").addEventListener("close", () => {
    if ($("confirm-delete").returnValue === "delete") deleteChat();
  });
  $("more").addEventListener("click", (event) => {
    event.stopPropagation();
    showActions($("more").getAttribute("aria-expanded") !== "true");
  });
  document.addEventListener("click", () => showActions(false)); // a pick, or a tap anywhere else, closes it
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    showActions(false);
    if (app.classList.contains("drawer-open")) closeDrawer();
  });
  $("chat-list").addEventListener("keydown", onListKey);
  for (const skip of document.querySelectorAll(".skip-link")) {
    skip.addEventListener("click", (event) => { // focus, not a #fragment: the address stays the chat's
      event.preventDefault();
      $(skip.dataset.target).focus();
    });
  }
  $("menu").addEventListener("click", () => (app.classList.contains("drawer-open") ? closeDrawer() : openDrawer()));
  $("backdrop").addEventListener("click", closeDrawer);
  $("parent-link").addEventListener("click", (event) => {
    event.preventDefault();
    const parents = state.chat ? state.chat.parent_ids : [];
    if (parents.length) navigate(parents[parents.length - 1]);
  });
  window.addEventListener("popstate", () => {
    const match = window.location.pathname.match(/^\/chat\/([A-Za-z0-9_-]{1,64})$/);
    if (match) openChat(match[1]); else newChat();
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshChats(); });
  window.addEventListener("pagehide", () => feed.leave());
  window.addEventListener("pageshow", (event) => { if (event.persisted) window.location.reload(); });
  setInterval(() => { if (!document.hidden) refreshChats(); }, 5000);

  watchScrolling();
  refreshChats();
  if (state.chatId) openChat(state.chatId); else newChat();
  app.dataset.ready = "true"; // for tests and scripts: the handlers are attached
})();
