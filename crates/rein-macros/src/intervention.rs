//! `#[intervention]`: an inherent `impl` block of lifecycle methods becomes an
//! `InterventionHandler` (name, error policy, mode and subscriptions written for you).

use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{FnArg, ImplItem, ItemImpl, LitStr, Path};

/// The lifecycle methods a handler may define: (method, `EventSet` constant, event, action).
const EVENTS: [(&str, &str, &str, &str); 6] = [
    (
        "before_invocation",
        "BEFORE_INVOCATION",
        "BeforeInvocationEvent",
        "BeforeInvocationAction",
    ),
    (
        "before_model_call",
        "BEFORE_MODEL_CALL",
        "BeforeModelCallEvent",
        "BeforeModelCallAction",
    ),
    (
        "after_model_call",
        "AFTER_MODEL_CALL",
        "AfterModelCallEvent",
        "AfterModelCallAction",
    ),
    (
        "model_output",
        "MODEL_OUTPUT",
        "ModelOutputEvent",
        "ModelOutputAction",
    ),
    (
        "before_tool_call",
        "BEFORE_TOOL_CALL",
        "BeforeToolCallEvent",
        "BeforeToolCallAction",
    ),
    (
        "after_tool_call",
        "AFTER_TOOL_CALL",
        "AfterToolCallEvent",
        "AfterToolCallAction",
    ),
];

#[derive(Default)]
struct Args {
    name: Option<LitStr>,
    on_error: Option<LitStr>,
    mode: Option<LitStr>,
    krate: Option<Path>,
}

fn parse_args(attr: TokenStream2) -> syn::Result<Args> {
    let mut args = Args::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            args.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("on_error") {
            args.on_error = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("mode") {
            args.mode = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("crate") {
            let lit: LitStr = meta.value()?.parse()?;
            args.krate = Some(lit.parse_with(Path::parse_mod_style)?);
        } else {
            return Err(meta.error(
                "unknown #[intervention] attribute; expected `name`, `on_error`, `mode` or `crate`",
            ));
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(args)
}

pub(crate) fn expand(attr: TokenStream2, item: TokenStream2) -> TokenStream2 {
    match expand_impl(attr, item.clone()) {
        Ok(out) => out,
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(item);
            out
        }
    }
}

fn expand_impl(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let args = parse_args(attr)?;
    let block: ItemImpl = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "#[intervention] goes on an inherent `impl Type { .. }` block of lifecycle methods",
        )
    })?;
    if let Some((_, path, _)) = &block.trait_ {
        return Err(syn::Error::new_spanned(
            path,
            "#[intervention] goes on an inherent `impl Type { .. }` block, not a trait impl",
        ));
    }
    let name = args.name.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "#[intervention] needs a name: #[intervention(name = \"tool-guard\")]",
        )
    })?;
    let krate = args
        .krate
        .unwrap_or_else(|| syn::parse_quote!(::rein::interventions));
    let on_error = match &args.on_error {
        None => quote!(),
        Some(lit) => {
            let variant = match lit.value().as_str() {
                "throw" => quote!(Throw),
                "proceed" => quote!(Proceed),
                "deny" => quote!(Deny),
                _ => {
                    return Err(syn::Error::new_spanned(
                        lit,
                        "on_error is \"throw\", \"proceed\" or \"deny\"",
                    ));
                }
            };
            quote!(fn on_error(&self) -> #krate::OnError { #krate::OnError::#variant })
        }
    };
    let mode = match &args.mode {
        None => quote!(),
        Some(lit) => {
            let variant = match lit.value().as_str() {
                "enforce" => quote!(Enforce),
                "shadow" => quote!(Shadow),
                _ => {
                    return Err(syn::Error::new_spanned(
                        lit,
                        "mode is \"enforce\" or \"shadow\"",
                    ));
                }
            };
            quote!(fn mode(&self) -> #krate::Mode { #krate::Mode::#variant })
        }
    };

    let mut sets = Vec::new();
    let mut methods = Vec::new();
    for item in &block.items {
        let ImplItem::Fn(f) = item else { continue };
        let ident = f.sig.ident.to_string();
        let Some((method, set, event, action)) = EVENTS.iter().find(|(m, ..)| *m == ident) else {
            continue;
        };
        let inputs: Vec<&FnArg> = f.sig.inputs.iter().collect();
        if !matches!(inputs.first(), Some(FnArg::Receiver(_))) || !(2..=3).contains(&inputs.len()) {
            return Err(syn::Error::new_spanned(
                &f.sig,
                format!(
                    "`{method}` takes `&self`, the event (`&{event}`) and optionally the context \
                     (`&InterventionContext`)"
                ),
            ));
        }
        let method = syn::Ident::new(method, f.sig.ident.span());
        let set = syn::Ident::new(set, Span::call_site());
        let event = syn::Ident::new(event, Span::call_site());
        let action = syn::Ident::new(action, Span::call_site());
        let call = if inputs.len() == 3 {
            quote!(Self::#method(self, event, cx))
        } else {
            quote!(Self::#method(self, event))
        };
        let call = if f.sig.asyncness.is_some() {
            quote!(#call.await)
        } else {
            call
        };
        sets.push(quote!(#krate::EventSet::#set));
        methods.push(quote! {
            async fn #method(
                &self,
                event: &#krate::#event,
                cx: &#krate::InterventionContext,
            ) -> ::core::result::Result<#krate::#action, #krate::HandlerError> {
                let _ = cx;
                #krate::IntoHandlerResult::into_handler_result(#call)
            }
        });
    }
    if methods.is_empty() {
        return Err(syn::Error::new_spanned(
            &block.self_ty,
            "#[intervention] found no lifecycle method: define one of before_invocation, \
             before_model_call, after_model_call, model_output, before_tool_call, after_tool_call",
        ));
    }
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let self_ty = &block.self_ty;
    Ok(quote! {
        #block

        impl #impl_generics #krate::InterventionHandler for #self_ty #where_clause {
            fn name(&self) -> &str {
                #name
            }
            #on_error
            #mode
            fn subscriptions(&self) -> #krate::EventSet {
                #krate::EventSet::NONE #(.union(#sets))*
            }
            #(#methods)*
        }
    })
}
