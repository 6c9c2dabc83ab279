/* anges web chat: the live feeds of every page of this browser, over one connection.

   Browsers allow six connections to a site: a page holding a stream of its own would leave the seventh
   unable to load. So one EventSource to /api/feed carries every chat the pages follow, each page's messages
   tagged with its subscriptions. It is held by a SharedWorker, or where there is none by one page, elected
   with a Web Lock, that passes the messages to the others over a BroadcastChannel; without either, each page
   holds its own. This file is both the worker and the pages' side of it. */
"use strict";

(() => {
  const FEED_URL = "/api/feed";
  const CHANNEL = "anges-feed";
  const LEADER_LOCK = "anges-feed-leader";
  const PAGE_LOCK = "anges-feed-page-";
  const FEED_EVENTS = ["steps", "child", "live", "status", "gone", "end"];

  // The one connection, for the subscriptions of every page. `deliver(page, message)` reaches a page ("*": all).
  // Each `steps` message says where its chat resumes, so a new connection (a page came or went, the server
  // restarted) goes on without gaps or repeats.
  class Hub {
    constructor(deliver) {
      this.deliver = deliver;
      this.subs = new Map(); // subscription id -> {page, uid, from, blocks}
      this.source = null;
      this.timer = null;
      this.retryDelay = 0;
    }

    handle(message) {
      if (message.op === "watch") {
        const { page, sub, uid, from, blocks } = message;
        this.subs.set(sub, { page, uid, from, blocks });
      } else if (message.op === "unwatch") {
        if (!this.subs.delete(message.sub)) return;
      } else if (message.op === "bye") {
        for (const [sub, watch] of this.subs) if (watch.page === message.page) this.subs.delete(sub);
      } else {
        return;
      }
      this.connectSoon(30); // one new connection for the changes of the same moment
    }

    connectSoon(delay) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.connect(), delay);
    }

    close() {
      if (this.source) this.source.close();
      this.source = null;
    }

    connect() {
      this.close();
      if (!this.subs.size) return;
      const query = new URLSearchParams();
      for (const [sub, w] of this.subs) query.append("watch", `${sub}~${w.uid}~${w.from}~${w.blocks}`);
      const source = new EventSource(`${FEED_URL}?${query}`);
      let opened = false;
      this.source = source;
      source.addEventListener("open", () => {
        opened = true;
        this.retryDelay = 0;
        this.deliver("*", { hub: "up" });
      });
      for (const name of FEED_EVENTS) {
        source.addEventListener(name, (event) => { if (this.source === source) this.route(name, event.data); });
      }
      source.addEventListener("error", () => {
        if (this.source !== source) return;
        this.close();
        this.deliver("*", { hub: opened ? "down" : "refused" }); // refused: perhaps the session ended
        this.retryDelay = Math.min(Math.max(this.retryDelay * 2, 1000), 10000);
        this.connectSoon(this.retryDelay);
      });
    }

    route(name, raw) {
      const data = JSON.parse(raw);
      if (data.sub === undefined) { // the connection's own end
        if (name !== "end") return;
        this.close();
        if (data.reason === "lifetime") this.connect();
        else if (data.reason === "login") {
          this.subs.clear();
          this.deliver("*", { hub: "login" });
        }
        return;
      }
      const watch = this.subs.get(data.sub);
      if (!watch) return; // unwatched meanwhile
      if (data.resume) Object.assign(watch, data.resume);
      if (name === "end" || name === "gone") this.subs.delete(data.sub);
      this.deliver(watch.page, { sub: data.sub, feed: name, data: raw });
    }
  }

  function holdLock(name) {
    // Resolves once this page holds the lock, which it keeps while it lives: whoever asks for it next learns
    // that the page is gone (a closed page says nothing otherwise).
    if (!self.navigator.locks) return Promise.resolve(false);
    return new Promise((held) => {
      self.navigator.locks.request(name, () => {
        held(true);
        return new Promise(() => {});
      });
    });
  }

  function whenGone(page, then) {
    if (self.navigator.locks) self.navigator.locks.request(PAGE_LOCK + page, () => then());
  }

  // -- the SharedWorker ---------------------------------------------------------------------------------------

  function runWorker() {
    const ports = new Map(); // page id -> its MessagePort
    const hub = new Hub((page, message) => {
      for (const [id, port] of ports) if (page === "*" || page === id) port.postMessage(message);
    });
    const forget = (page) => {
      ports.delete(page);
      hub.handle({ op: "bye", page });
    };
    self.onconnect = (event) => {
      const port = event.ports[0];
      port.onmessage = ({ data }) => {
        if (data.op === "hello") {
          ports.set(data.page, port);
          if (data.locked) whenGone(data.page, () => forget(data.page));
        } else if (data.op === "bye") {
          forget(data.page);
        } else {
          hub.handle(data);
        }
      };
    };
  }

  // -- a page ---------------------------------------------------------------------------------------------------

  // A page's subscriptions: watch(uid, from, blocks, handler) -> id, handler(event, data); unwatch(id).
  // `onHub(state)` hears of the connection: up, down, refused (never opened) or login (the session ended);
  // `onRole(role)` says how this page takes part: worker, leader, follower or alone.
  class Feed {
    constructor(workerUrl, onHub, onRole) {
      this.page = Math.random().toString(36).slice(2, 12).padEnd(10, "0");
      this.subs = new Map(); // id -> {uid, from, blocks, handler}
      this.count = 0;
      this.onHub = onHub;
      this.onRole = onRole;
      this.hub = null;
      this.locked = holdLock(PAGE_LOCK + this.page); // resolves to whether the page holds its lock
      this.ready = this.locked; // then resolves once the page has said hello
      if (self.SharedWorker) {
        try {
          this.useWorker(workerUrl);
          return;
        } catch (err) {
          console.warn("shared worker:", err.message);
        }
      }
      if (self.navigator.locks && self.BroadcastChannel) this.useChannel();
      else this.keepAlone();
    }

    useWorker(url) {
      const worker = new SharedWorker(url, { name: "anges-feed" });
      worker.onerror = () => { // it could not start: follow alone
        this.keepAlone();
        for (const [sub, w] of this.subs) this.send(this.watchMessage(sub, w));
      };
      const port = worker.port;
      port.onmessage = ({ data }) => this.receive(data);
      this.ready = this.locked.then((locked) => port.postMessage({ op: "hello", page: this.page, locked }));
      this.send = (message) => port.postMessage(message);
      this.onRole("worker");
    }

    keepAlone() {
      this.hub = new Hub((page, message) => this.receive(message));
      this.send = (message) => this.hub.handle(message);
      this.onRole("alone");
    }

    useChannel() {
      const channel = new BroadcastChannel(CHANNEL);
      this.onRole("follower");
      this.send = (message) => (this.hub ? this.lead(message) : channel.postMessage(message));
      this.ready = this.locked.then((locked) => this.send({ op: "hello", page: this.page, locked }));
      channel.onmessage = ({ data }) => {
        if (data.to !== undefined) {
          if (data.to === this.page || data.to === "*") this.receive(data);
        } else if (this.hub) {
          this.lead(data);
        } else if (data.op === "leader") { // a new leader holds the connection: tell it what this page follows
          this.locked.then((locked) => this.send({ op: "hello", page: this.page, locked }));
          for (const [sub, w] of this.subs) this.post(this.watchMessage(sub, w));
        }
      };
      self.navigator.locks.request(LEADER_LOCK, () => {
        this.hub = new Hub((page, message) => {
          if (page === "*" || page === this.page) this.receive(message);
          if (page !== this.page) channel.postMessage({ ...message, to: page });
        });
        this.onRole("leader");
        for (const [sub, w] of this.subs) this.hub.handle(this.watchMessage(sub, w));
        channel.postMessage({ op: "leader" });
        return new Promise(() => {}); // leads while it lives
      });
    }

    lead(message) {
      if (message.op === "hello") {
        if (message.locked && message.page !== this.page) {
          whenGone(message.page, () => this.hub.handle({ op: "bye", page: message.page }));
        }
      } else {
        this.hub.handle(message);
      }
    }

    post(message) {
      this.ready.then(() => this.send(message));
    }

    watchMessage(sub, w) {
      return { op: "watch", page: this.page, sub, uid: w.uid, from: w.from, blocks: w.blocks };
    }

    watch(uid, from, blocks, handler) {
      this.count += 1;
      const sub = this.page + this.count.toString(36);
      const w = { uid, from, blocks, handler };
      this.subs.set(sub, w);
      this.post(this.watchMessage(sub, w));
      return sub;
    }

    unwatch(sub) {
      if (this.subs.delete(sub)) this.post({ op: "unwatch", page: this.page, sub });
    }

    leave() {
      this.subs.clear();
      this.send({ op: "bye", page: this.page });
    }

    receive(message) {
      if (message.hub) {
        if (message.hub === "login") this.subs.clear();
        this.onHub(message.hub);
        return;
      }
      const w = this.subs.get(message.sub);
      if (!w) return;
      const data = JSON.parse(message.data);
      if (data.resume) Object.assign(w, data.resume);
      if (message.feed === "end" || message.feed === "gone") this.subs.delete(message.sub);
      w.handler(message.feed, data);
    }
  }

  if (typeof SharedWorkerGlobalScope !== "undefined" && self instanceof SharedWorkerGlobalScope) {
    runWorker();
  } else {
    self.AngesFeed = Feed;
  }
})();
